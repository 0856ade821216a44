"""pipeline/reference_runtime/completion.py: the text the reference runtime gives the LLM-API contract is the
text TensorRT-LLM 1.1 gives (the module's docstring names the upstream lines): a streamed text never holds the
prompt, a whole one holds it unless excluded and looks for stop strings in it, and the first stop string in the
order given wins."""

from __future__ import annotations

from pipeline.reference_runtime.completion import Completion, TextRules, completion, first_stop

# a "tokenizer" of one character per token: decode is joining
PROMPT = [ord(c) for c in "Say it. Then"]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def tokens(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_a_streamed_text_never_holds_the_prompt_even_when_not_excluded() -> None:
    rules = TextRules(streaming=True, include_prompt=True)
    assert completion(decode, rules, PROMPT, tokens(" go")) == Completion(" go", False)
    assert completion(decode, rules, PROMPT, tokens(" go on"), "length") == Completion(" go on", True, "length")


def test_a_whole_text_holds_the_prompt_unless_excluded() -> None:
    with_prompt = TextRules(streaming=False, include_prompt=True)
    assert completion(decode, with_prompt, PROMPT, tokens(" go"), "stop").text == "Say it. Then go"
    assert completion(decode, TextRules(streaming=False, include_prompt=False), PROMPT, tokens(" go"), "stop").text == " go"


def test_without_streaming_a_stop_string_is_found_in_the_prompt_too() -> None:
    rules = TextRules(streaming=False, include_prompt=True, stop=(".",))
    assert completion(decode, rules, PROMPT, tokens(" go"), "length") == Completion("Say it", True, "stop", ".")
    # excluded: the prompt is not searched
    rules = TextRules(streaming=False, include_prompt=False, stop=(".",))
    assert completion(decode, rules, PROMPT, tokens(" go"), "length") == Completion(" go", True, "length")


def test_before_the_end_a_whole_request_sends_nothing_unless_a_generated_stop_string_ends_it() -> None:
    rules = TextRules(streaming=False, include_prompt=False, stop=("!",))
    assert completion(decode, rules, PROMPT, tokens(" go")).finished is False
    assert completion(decode, rules, PROMPT, tokens(" go!")) == Completion(" go", True, "stop", "!")


def test_the_first_stop_string_in_the_given_order_wins_not_the_earliest() -> None:
    assert first_stop("a, b. c", ["." , ","]) == "."
    rules = TextRules(streaming=True, include_prompt=False, stop=(".", ","))
    assert completion(decode, rules, PROMPT, tokens(" a, b. c")) == Completion(" a, b", True, "stop", ".")


def test_a_cancelled_end_keeps_its_reason_and_text() -> None:
    rules = TextRules(streaming=True, include_prompt=False, stop=(".",))
    assert completion(decode, rules, PROMPT, tokens(" a."), "cancelled") == Completion(" a.", True, "cancelled")

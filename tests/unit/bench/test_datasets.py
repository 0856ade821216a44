"""--dataset NAME|FILE: the built-in prompt sets and OpenAI-style chat logs."""

from __future__ import annotations

import json

import pytest

from bench_fakes import WhitespaceTokenizer, word_tokenizer
from pipeline.bench.datasets import BUILT_IN, chat_prompt, resolve_dataset
from pipeline.bench.spec import Dist
from pipeline.bench.workload import dataset_requests
from pipeline.core.errors import InvalidInputError


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_sets_are_chat_logs_that_load(name):
    path = resolve_dataset(name)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 10 and all(r["messages"][-1]["role"] == "user" for r in rows)
    loaded = dataset_requests(path, WhitespaceTokenizer(), Dist(mean=8))
    assert len(loaded) == len(rows) and all(r.prompt.endswith("assistant:") and r.max_tokens == rows[0]["max_tokens"]
                                            for r in loaded)


def test_summarization_prompts_hold_the_passage_to_copy():
    rows = [json.loads(line) for line in resolve_dataset("summarization").read_text().splitlines()]
    for row in rows:
        ask, _, passage = row["messages"][0]["content"].partition("\n\n")
        assert any(word in ask for word in ("Repeat", "Copy", "Summarise")) and len(passage.split()) > 25


def test_chat_log_prompt_template_and_reference_answer(tmp_path):
    tokenizer = word_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "aaaa aaab"},
                      {"role": "assistant", "content": "aaac aaad aaae"}]},
        {"messages": [{"role": "user", "content": "aaaf"}], "max_tokens": 7},
        {"prompt": "aaag"},
    ]) + "\n")
    first, second, third = dataset_requests(log, tokenizer, Dist(mean=5))
    assert first.prompt == "<system>be brief<user>aaaa aaab<assistant>"
    assert first.max_tokens == 3  # the reference answer's length
    assert second.max_tokens == 7 and third.prompt == "aaag" and third.max_tokens == 5


@pytest.mark.parametrize("messages", [[], [{"role": "user"}], "hi", [{"role": "assistant", "content": "x"}]])
def test_bad_chat_logs_are_refused(messages):
    with pytest.raises(InvalidInputError):
        chat_prompt(messages, WhitespaceTokenizer(), "f:1")


def test_unknown_dataset_names_the_built_in_sets():
    with pytest.raises(InvalidInputError) as caught:
        resolve_dataset("nope")
    assert "chat, summarization, code" in caught.value.hint

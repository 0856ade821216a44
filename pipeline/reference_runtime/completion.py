"""CompletionOutput.text as TensorRT-LLM 1.1's LLM API makes it, for the reference runtime behind the Triton
LLM-API contract (model_repo_templates/llmapi/tensorrt_llm/1/model.py): which tokens the text is decoded from,
and where a stop string ends it. Pure functions over token ids and a decode function; the model passes one that
decodes incrementally (model_repo_templates/pipeline_model_support.py IncrementalText), as every call but the
last decodes the generated tokens, one more each time.

What the GPU does (NVIDIA/TensorRT-LLM):
- the tokens a response carries: cpp/tensorrt_llm/batch_manager/llmRequest.cpp @119c6e60, createResult's
  calculateNbTokensOut (lines 113-120): without streaming, every token of the sequence less the prompt when
  exclude_input_from_output is set (the prompt is included otherwise); when streaming, the tokens since the last
  response, so a streamed output never holds the prompt, whatever exclude_input_from_output says;
- the LLM API adds them up and decodes the sum: tensorrt_llm/executor/result.py at v1.1.0
  (GenerationResultBase._handle_sequence: `output.token_ids.extend(...)`; DetokenizedGenerationResultBase
  ._handle_response: `tokenizer.decode(token_ids)`, or decode_incrementally when streaming);
- stop strings are looked for in that text, prompt included when it is there, while generating or when it
  ended with 'stop' or 'length': the first of `stop`, in the order given, that occurs in it cuts the text where
  it first occurs (include_stop_str_in_output false, the contract's default), and the output ends with
  finish_reason 'stop' and stop_reason that string (the same _handle_response; read from the 1.1.0 docs'
  module source 1.1.0/_modules/tensorrt_llm/executor/result.html, NVIDIA/TensorRT-LLM gh-pages @8660c119).
Without streaming the executor answers once, at the end; before that only its token-level stop check can end
the request, which looks at what was generated (approximated here on the generated text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

Decode = Callable[[list[int]], str]


@dataclass(frozen=True)
class TextRules:
    """What a request asks of its text: streamed or not, the prompt in front (exclude_input_from_output false),
    and its stop strings."""

    streaming: bool
    include_prompt: bool
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Completion:
    """One response's text; `finished` with its finish_reason (and stop_reason for a stop string)."""

    text: str
    finished: bool
    finish_reason: str | None = None
    stop_reason: str | None = None


def first_stop(text: str, stop: Sequence[str]) -> str | None:
    """The first stop string, in the order given, that occurs in text (the LLM API's order, not the earliest)."""
    return next((word for word in stop if word in text), None)


def completion(decode: Decode, rules: TextRules, prompt_ids: Sequence[int], tokens: Sequence[int],
               reason: str | None = None) -> Completion:
    """The text of a response after `tokens` were generated. `reason`: None while generating, else how the
    engine ended the request (stop, length, cancelled). Without streaming, a response before the end is
    finished=False and empty unless a stop string in the generated text ends the request now."""
    if not rules.streaming and reason is None:
        if first_stop(decode(list(tokens)), rules.stop) is None:
            return Completion("", False)
        reason = "stop"
    ids = list(tokens) if rules.streaming or not rules.include_prompt else [*prompt_ids, *tokens]
    text = decode(ids)
    if reason in (None, "stop", "length"):
        hit = first_stop(text, rules.stop)
        if hit is not None:
            return Completion(text[:text.find(hit)], True, "stop", hit)
    return Completion(text, reason is not None, reason)

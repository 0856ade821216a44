"""`--dataset NAME|FILE`: the built-in prompt sets (pipeline/data/bench/, described in its README.md) and the
OpenAI-style chat log rows a dataset may hold ({"messages": [{"role", "content"}, ...]}) beside plain prompts."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from pipeline.core.errors import InvalidInputError

BUILT_IN = ("chat", "summarization", "code")


def resolve_dataset(text: str) -> Path:
    """A built-in set's name (chat, summarization, code) or a file path, as the file to read."""
    if text in BUILT_IN:
        return Path(str(importlib.resources.files("pipeline.data").joinpath("bench").joinpath(f"{text}.jsonl")))
    path = Path(text)
    if not path.is_file():
        raise InvalidInputError(f"Dataset {text!r} is neither a file nor a built-in set.",
                                hint=f"Pass a JSONL file (prompts, or chat logs {{\"messages\": [...]}}) or one of: "
                                f"{', '.join(BUILT_IN)}.")
    return path


def chat_prompt(messages: Any, tokenizer: Any, where: str) -> tuple[str, str | None]:
    """The prompt of a chat log (its turns up to the last user turn, through the tokenizer's chat template with the
    generation prompt; a `role: content` transcript when the tokenizer has no template) and the reference answer (a
    final assistant turn, dropped from the prompt: its length is the output length when the row gives none)."""
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages):
        raise InvalidInputError(f"{where}: messages must be a non-empty list of {{\"role\": ..., \"content\": ...}}.",
                                hint="Use OpenAI's chat format, e.g. {\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}.")
    answer = None
    if messages[-1]["role"] == "assistant":
        answer, messages = messages[-1]["content"], messages[:-1]
    if not messages:
        raise InvalidInputError(f"{where}: the chat log holds only an assistant turn.", hint="Give the user turn before it.")
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True), answer
    return "".join(f"{m['role']}: {m['content']}\n" for m in turns) + "assistant:", answer

"""What to send: prompts with exact token lengths built from the served model's tokenizer, or a
JSONL dataset. Token counts are the tokenizer's (no special tokens), never words."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from pipeline.bench.datasets import chat_prompt
from pipeline.bench.spec import Dist
from pipeline.core.errors import InvalidInputError

_WORDLIKE = re.compile(r"^[\u0120\u2581 ]?[a-z]{3,10}$")  # 'Ġword' (byte BPE) or '▁word' (sentencepiece)
_DATASET_PROMPT_KEYS = ("text_input", "prompt", "text", "input")
_DATASET_OSL_KEYS = ("max_tokens", "output_length", "osl")


@dataclass(frozen=True)
class BenchRequest:
    """One request to send. min_tokens forces the output length when set (synthetic workloads)."""

    index: int
    prompt: str
    isl: int
    max_tokens: int
    min_tokens: int | None = None
    adapter: str | None = None  # --lora-mix: the class (an adapter's name or "base"; pipeline/bench/lora_mix.py)
    lora_task_id: int | None = None  # None: no adapter
    lora_path: str | None = None  # the adapter on the server (trtllm-serve's lora_request)


def load_tokenizer(path: Path) -> Any:
    """The served model's tokenizer (a Hugging Face tokenizer folder)."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise InvalidInputError(f"Tokenizer folder {path} does not exist.",
                                hint="Pass --tokenizer DIR: the model's HF folder (tokenizer.json, tokenizer_config.json).")
    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise InvalidInputError(f"Cannot load a tokenizer from {path}: {error}",
                                hint="Pass --tokenizer DIR pointing at the served model's Hugging Face folder.") from error


def count_tokens(tokenizer: Any, texts: Iterable[str]) -> list[int]:
    texts = list(texts)
    if not texts:
        return []
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [len(ids) for ids in encoded]


def sample_lengths(dist: Dist, n: int, rng: random.Random, *, upper: int | None = None) -> list[int]:
    """n lengths from normal(mean, std), rounded, clipped to [1, upper]."""
    out = []
    for _ in range(n):
        value = dist.mean if dist.std == 0 else int(round(rng.gauss(dist.mean, dist.std)))
        value = max(1, value)
        out.append(min(value, upper) if upper else value)
    return out


class PromptFactory:
    """Random word-like tokens of the vocabulary, checked by a round trip so that
    `len(tokenize(prompt)) == isl` exactly. Random words defeat prefix caching between requests."""

    def __init__(self, tokenizer: Any, seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.pool = [i for i, tok in enumerate(vocab)
                     if i not in special and isinstance(tok, str) and _WORDLIKE.match(tok) and tok[0] in "\u0120\u2581 "]
        if len(self.pool) < 100:
            raise InvalidInputError("The tokenizer has too few word-like tokens to build synthetic prompts.",
                                    hint="Use --dataset FILE.jsonl with real prompts instead.")

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt(self, length: int) -> tuple[str, int]:
        """A prompt of exactly `length` tokens (the actual count is returned; it equals length
        except in pathological tokenizers, after 32 adjustment rounds)."""
        ids = [self.rng.choice(self.pool) for _ in range(length)]
        text = self.tokenizer.decode(ids).strip()
        count = len(self._encode(text))
        for _ in range(32):
            if count == length:
                break
            if count > length:
                ids = ids[: max(1, len(ids) - (count - length))]
            else:
                ids = ids + [self.rng.choice(self.pool) for _ in range(length - count)]
            text = self.tokenizer.decode(ids).strip()
            count = len(self._encode(text))
        return text, count


def synthetic_requests(tokenizer: Any, isl: Dist, osl: Dist, n: int, seed: int = 0, *, start: int = 0) -> list[BenchRequest]:
    rng = random.Random(seed)
    factory = PromptFactory(tokenizer, seed=seed + 1)
    isls = sample_lengths(isl, n, rng)
    osls = sample_lengths(osl, n, rng)
    requests = []
    for i, (in_len, out_len) in enumerate(zip(isls, osls)):
        text, count = factory.prompt(in_len)
        requests.append(BenchRequest(index=start + i, prompt=text, isl=count, max_tokens=out_len, min_tokens=out_len))
    return requests


def dataset_requests(path: Path, tokenizer: Any, osl: Dist, seed: int = 0) -> list[BenchRequest]:
    """JSONL: one object per line with the prompt under text_input/prompt/text/input, or an OpenAI-style chat log
    under messages (pipeline.bench.datasets.chat_prompt), and optionally the output length under
    max_tokens/output_length/osl (else a chat log's final assistant turn's length, else drawn from --osl; not forced)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"Dataset {path} does not exist.", hint="Pass a JSONL file: one {\"text_input\": ...} per line.")
    rng = random.Random(seed)
    rows: list[tuple[str, int | None]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"{path}:{number} is not JSON: {error}", hint="One JSON object per line.") from None
        if not isinstance(row, dict):
            raise InvalidInputError(f"{path}:{number} is not a JSON object.", hint="One {\"text_input\": ...} object per line.")
        prompt, answer = next((row[k] for k in _DATASET_PROMPT_KEYS if isinstance(row.get(k), str)), None), None
        if prompt is None and "messages" in row:
            prompt, answer = chat_prompt(row["messages"], tokenizer, f"{path}:{number}")
        if prompt is None:
            raise InvalidInputError(f"{path}:{number} has no prompt.",
                                    hint=f"Put the prompt under one of {_DATASET_PROMPT_KEYS}, or a chat log under messages.")
        out_len = next((int(row[k]) for k in _DATASET_OSL_KEYS if isinstance(row.get(k), (int, float))), None)
        if out_len is None and answer:
            out_len = max(1, count_tokens(tokenizer, [answer])[0])
        rows.append((prompt, out_len))
    if not rows:
        raise InvalidInputError(f"Dataset {path} holds no prompts.", hint="One {\"text_input\": ...} object per line.")
    isls = count_tokens(tokenizer, [p for p, _ in rows])
    drawn = sample_lengths(osl, len(rows), rng)
    return [BenchRequest(index=i, prompt=p, isl=isl, max_tokens=d if o is None else o, min_tokens=None)
            for i, ((p, o), isl, d) in enumerate(zip(rows, isls, drawn))]


def cycle(requests: list[BenchRequest], n: int | None, *, start: int = 0):
    """Requests in order, repeated (with fresh indices) until n are given; forever when n is None."""
    i = 0
    while n is None or i < n:
        base = requests[i % len(requests)]
        yield replace(base, index=start + i)
        i += 1

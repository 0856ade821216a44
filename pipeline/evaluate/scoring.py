"""Scoring: perplexity and top-1 figures of a model over evaluation windows.

- perplexity: exp(mean token-level negative log-likelihood of every next token), and
- top-1 agreement: how often the format's most likely next token equals the baseline's.

The evaluation texts are shipped in `pipeline/data/eval/` (distinct from the calibration set), or
the user's .txt/.jsonl.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.evaluate.spec import FormatResult
from pipeline.quantization.simulated import Variant, simulation_note

EVAL_DATA = Path(__file__).parent.parent / "data" / "eval" / "eval.jsonl"


# ----------------------------------------------------------------------------------------------
# Evaluation texts


def load_eval_texts(path: Path | None = None) -> list[str]:
    """Texts from a .jsonl file (one object per line with a "text" field, or a JSON string) or a
    plain-text file (paragraphs separated by blank lines). Default: the shipped evaluation set."""
    path = Path(path) if path is not None else EVAL_DATA
    if not path.is_file():
        raise InvalidInputError(f"Evaluation data {path} does not exist.", hint="Give a .txt or .jsonl file with --data.")
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"Evaluation data {path} is not UTF-8 text.", hint="Give a UTF-8 .txt or .jsonl file.") from None
    if path.suffix.lower() in {".jsonl", ".json"}:
        texts = []
        for number, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidInputError(
                    f"{path}:{number} is not valid JSON ({error.msg}).",
                    hint='Each line of a .jsonl file must be an object like {"text": "..."}.',
                ) from None
            text = item.get("text") if isinstance(item, dict) else item
            if not isinstance(text, str):
                raise InvalidInputError(
                    f'{path}:{number} has no string "text" field.',
                    hint='Each line of a .jsonl file must be an object like {"text": "..."}.',
                )
            texts.append(text)
    else:
        texts = [block for block in (b.strip() for b in raw.replace("\r\n", "\n").split("\n\n"))]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise InvalidInputError(f"Evaluation data {path} holds no text.", hint="Give a file with at least one paragraph.")
    return texts


def token_windows(tokenizer: Any, texts: list[str], max_len: int) -> list[list[int]]:
    """Each text tokenized on its own and cut into windows of at most max_len tokens (>= 2 each)."""
    windows: list[list[int]] = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        for start in range(0, len(ids), max_len):
            window = ids[start : start + max_len]
            if len(window) >= 2:
                windows.append(window)
    if not windows:
        raise InvalidInputError("The evaluation texts are too short: no text has two tokens.", hint="Give longer texts.")
    return windows


# ----------------------------------------------------------------------------------------------
# Scoring


class Score(BaseModel):
    """Figures of one model over the evaluation windows."""

    model_config = ConfigDict(frozen=True)

    perplexity: float
    nll_sum: float
    tokens: int
    top1_accuracy: float  # argmax == the text's next token
    top1_agreement: float  # argmax == the reference model's argmax (1.0 for the reference itself)


def score_model(
    model: Any,
    windows: list[list[int]],
    *,
    reference: Any = None,
    batch_size: int = 4,
    pad_id: int = 0,
    progress: Callable[[int], None] | None = None,
) -> tuple[Score, Any]:
    """Perplexity and top-1 figures of model over windows; returns (score, argmax predictions).

    Windows are right-padded into batches (padding is masked out of attention and of the loss, and
    the real tokens keep positions 0..n-1). `reference` is another run's predictions (the baseline);
    without it, agreement is measured against this run's own predictions (1.0).
    """
    import torch
    import torch.nn.functional as F

    order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))
    predictions: list[Any] = [None] * len(windows)
    nll_sum = 0.0
    correct = 0
    tokens = 0
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = [windows[i] for i in order[start : start + batch_size]]
            width = max(len(w) for w in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, window in enumerate(batch):
                ids[row, : len(window)] = torch.tensor(window)
                mask[row, : len(window)] = 1
            device = getattr(model, "device", None)
            if device is not None and str(device) != "cpu":  # under a device_map: the embedding's GPU
                ids, mask = ids.to(device), mask.to(device)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            targets = ids[:, 1:]
            valid = mask[:, 1:].bool()
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
            nll_sum += float(nll.reshape(targets.shape)[valid].double().sum())
            argmax = logits.argmax(-1)
            correct += int((argmax == targets)[valid].sum())
            tokens += int(valid.sum())
            for row, index in enumerate(order[start : start + batch_size]):
                predictions[index] = argmax[row, : len(windows[index]) - 1].clone()
            if progress is not None:
                progress(len(batch))
    flat = torch.cat(predictions)
    agreement = 1.0 if reference is None else float((flat == reference).double().mean())
    if not math.isfinite(nll_sum):
        perplexity = float("inf")
    else:
        perplexity = math.exp(nll_sum / tokens) if nll_sum / tokens < 700 else float("inf")
    score = Score(
        perplexity=perplexity, nll_sum=nll_sum, tokens=tokens, top1_accuracy=correct / tokens, top1_agreement=agreement
    )
    return score, flat


def format_row(
    variant: Variant, score: Score, baseline: FormatResult, kv_counts: dict[str, int], quantize_s: float, eval_s: float
) -> FormatResult:
    """A variant's row: its score against the baseline, and whether its KV quantizers ran."""
    kv_measured: bool | None = None
    note = None
    if variant.kv.kv_cache_quant_algo:
        kv_measured = kv_counts["quantizers"] > 0 and kv_counts["calls"] > 0
        if not kv_measured:
            note = (
                f"KV cache {variant.kv.name} was NOT measured: ModelOpt's K/V quantizers "
                f"({kv_counts['quantizers']} enabled) never ran in this model's attention on the CPU"
            )
    return FormatResult(
        name=variant.name,
        quant=variant.quant,
        kv_cache=variant.kv_cache,
        simulation=simulation_note(variant),
        perplexity=score.perplexity,
        delta=relative_delta(score.perplexity, baseline.perplexity),
        top1_agreement=score.top1_agreement,
        top1_accuracy=score.top1_accuracy,
        tokens=score.tokens,
        kv_measured=kv_measured,
        kv_quantizer_calls=kv_counts["calls"],
        note=note,
        quantize_s=round(quantize_s, 3),
        eval_s=round(eval_s, 3),
    )


def relative_delta(value: float, baseline: float) -> float:
    """value / baseline - 1 (infinite when value is)."""
    if not math.isfinite(value):
        return float("inf")
    return value / baseline - 1.0

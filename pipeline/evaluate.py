"""The quantization accuracy gate: what each precision costs in perplexity before it ships.

For the unquantized baseline and each requested format, the model is scored on an evaluation text
set (shipped in `pipeline/data/eval/`, distinct from the calibration set, or the user's .txt/.jsonl):

- perplexity: exp(mean token-level negative log-likelihood of every next token), and
- top-1 agreement: how often the format's most likely next token equals the baseline's.

Quantized formats run ModelOpt's simulated ("fake") quantization on the CPU, produced by the same
`pipeline.quantize.quantize_model` (same configs, same calibration data) that makes the exported
TensorRT-LLM checkpoint: weights and activations are rounded to the format's grid and scales, the
arithmetic stays fp32. The baseline is the checkpoint in fp32 on the CPU (CPU fp16 matmuls are slow
and not what a GPU does either); the `fp16`/`bf16` rows round the weights to that dtype.

KV-cache quantization (`--kv-cache fp8|int8`) uses ModelOpt's attention `k_bmm_quantizer` /
`v_bmm_quantizer`; whether they actually ran during scoring is counted, not assumed, and a row
says `kv_measured: false` when they did not.

A format fails the gate when its perplexity rises more than `max_delta` (relative) over the
baseline; `evaluate` still writes every report, then the caller raises `GateFailedError` (exit 4)
via `check_gate`.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import math
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Callable, Optional

from pydantic import BaseModel, ConfigDict, Field

from pipeline.artifacts import (
    MANIFEST_NAME,
    atomic_dir,
    build_manifest,
    is_up_to_date,
    read_manifest,
    sha256_file,
    sha256_json,
    write_json_atomic,
    write_text_atomic,
)
from pipeline.calibration import DEFAULT_CALIB_SIZE
from pipeline.errors import GateFailedError, InvalidInputError
from pipeline.output import OUT
from pipeline.paths import model_slug, stage_dir
from pipeline.placement import Device, Job, Placement
from pipeline.quant import kv_cache_format
from pipeline.simulated import (
    BASELINE_DTYPE,
    Variant,
    calibration_texts,
    count_kv_quantizer_calls,
    simulated_model,
    simulation_note,
)

EVAL_VERSION = 1  # bump when the scoring changes, so cached reports are recomputed
EVAL_DATA = Path(__file__).parent / "data" / "eval" / "eval.jsonl"
DEFAULT_MAX_DELTA = 0.10
REPORT_STEM = "evaluate"
_PACKAGES = ("torch", "transformers", "nvidia-modelopt")


# ----------------------------------------------------------------------------------------------
# Specs and results


class EvaluateSpec(BaseModel):
    """What to measure. `model` is an HF checkpoint folder or a `pipeline download` SOURCE."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    variants: tuple[Variant, ...] = Field(min_length=1)
    data: Optional[Path] = None  # .txt (paragraphs split on blank lines) or .jsonl ("text" field)
    max_delta: float = Field(DEFAULT_MAX_DELTA, ge=0)
    calib_size: int = Field(DEFAULT_CALIB_SIZE, ge=1, description="calibration texts for formats that calibrate")
    calib_data: Optional[Path] = None  # as `pipeline convert --calib-data`; default: the shipped set
    calib_max_len: int = Field(256, ge=8)
    max_len: int = Field(512, ge=8, description="evaluation window in tokens (longer texts are split)")
    max_texts: Optional[int] = Field(None, ge=1, description="use only the first N evaluation texts")
    batch_size: int = Field(4, ge=1)
    device: Device = Field("auto", description="auto: the GPUs when the model fits them, else the CPU (with a warning)")
    out: Optional[Path] = None  # reports root; default build/<model>/reports
    force: bool = False

    @classmethod
    def from_formats(cls, model: str, quants: list[str], kv_cache: str | None = None, **kwargs: Any) -> "EvaluateSpec":
        """One variant per --quant, all with the same --kv-cache (duplicates dropped, order kept)."""
        kv = kv_cache_format(kv_cache).name
        variants: list[Variant] = []
        for quant in quants:
            variant = Variant(quant=quant, kv_cache=kv)
            if variant not in variants:
                variants.append(variant)
        return cls(model=model, variants=tuple(variants), **kwargs)


class Score(BaseModel):
    """Figures of one model over the evaluation windows."""

    model_config = ConfigDict(frozen=True)

    perplexity: float
    nll_sum: float
    tokens: int
    top1_accuracy: float  # argmax == the text's next token
    top1_agreement: float  # argmax == the reference model's argmax (1.0 for the reference itself)


class FormatResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    quant: str
    kv_cache: str
    simulation: str  # how this row was computed
    perplexity: float
    delta: float  # relative perplexity change vs the baseline
    top1_agreement: float
    top1_accuracy: float
    tokens: int
    kv_measured: Optional[bool] = None  # None: KV cache not quantized; False: asked for but never ran
    kv_quantizer_calls: int = 0
    note: Optional[str] = None
    quantize_s: float = 0.0
    eval_s: float = 0.0
    passed: bool = True


class EvaluateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    hf_dir: Path
    dataset: dict[str, Any]  # name, sha256, texts, windows, tokens
    baseline: FormatResult
    formats: tuple[FormatResult, ...]
    max_delta: float
    passed: bool
    failed: tuple[str, ...]
    report_dir: Path
    reports: dict[str, Path]
    inputs_hash: str
    cached: bool = False

    def rows(self) -> list[FormatResult]:
        return [self.baseline, *self.formats]


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


# ----------------------------------------------------------------------------------------------
# The stage


def resolve_model(model: str) -> tuple[Path, str]:
    """(HF checkpoint folder, model name for build/) from a folder or a `pipeline download` SOURCE."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise InvalidInputError(
                f"{folder} is not a Hugging Face checkpoint: config.json is missing.",
                hint="Give the folder `pipeline download` made (build/<model>/hf) or a SOURCE such as `demo`.",
            )
        folder = folder.resolve()
        manifest = read_manifest(folder) or {}
        name = manifest.get("model") or (folder.parent.name if folder.name == "hf" else folder.name)
        return folder, model_slug(str(name))
    from pipeline.download import DownloadSpec, download

    result = download(DownloadSpec(source=model))  # a no-op when the checkpoint is already there
    return result.path, result.model


def _checkpoint_fingerprint(hf_dir: Path) -> str:
    manifest = read_manifest(hf_dir)
    if manifest and manifest.get("files"):
        return sha256_json(manifest["files"])
    files = sorted(p for p in hf_dir.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    return sha256_json({p.name: [p.stat().st_size, int(p.stat().st_mtime)] for p in files})


def evaluate(spec: EvaluateSpec) -> EvaluateResult:
    """Measure the baseline and every variant; write JSON, CSV, Markdown and a PNG plot into
    `<reports>/evaluate-<id>/`. Same inputs again: the stored figures are reused (the gate is
    re-applied with this spec's max_delta). Does not raise on a failed gate: see `check_gate`."""
    from pipeline.artifacts import tool_versions

    started = time.time()
    hf_dir, model_name = resolve_model(spec.model)
    data_path = Path(spec.data).expanduser().resolve() if spec.data else EVAL_DATA
    texts = load_eval_texts(data_path)
    if spec.max_texts:
        texts = texts[: spec.max_texts]
    needs_calib = any(v.fmt.needs_calibration or v.kv.kv_cache_quant_algo for v in spec.variants)
    calib = calibration_texts(spec.calib_size, spec.calib_data) if needs_calib else []

    inputs = {
        "eval_version": EVAL_VERSION,
        "checkpoint": _checkpoint_fingerprint(hf_dir),
        "data": {"name": data_path.name, "sha256": sha256_file(data_path), "max_texts": spec.max_texts},
        "variants": [v.name for v in spec.variants],
        "calibration": sha256_json(calib),
        "calib_max_len": spec.calib_max_len,
        "max_len": spec.max_len,
        "versions": {k: v for k, v in tool_versions(*_PACKAGES).items() if k != "trtllm-pipeline"},
    }
    inputs_hash = sha256_json(inputs)
    root = Path(spec.out).expanduser().resolve() if spec.out else stage_dir(model_name, "reports")
    report_dir = root / f"{REPORT_STEM}-{inputs_hash[:10]}"

    if not spec.force and is_up_to_date(report_dir, inputs_hash):
        stored = json.loads((report_dir / f"{REPORT_STEM}.json").read_text(encoding="utf-8"))
        result = EvaluateResult.model_validate({**stored, "cached": True})
        return apply_gate(result, spec.max_delta)

    placement = place_evaluation(spec, hf_dir, model_name, len(texts))
    if placement.warning:
        OUT.warn(placement.warning)
    with redirect_stdout(sys.stderr):  # ModelOpt prints its progress to stdout; keep stdout for results
        rows = _measure(spec, hf_dir, texts, calib, placement)
    dataset = {
        "name": data_path.name if spec.data else "shipped eval set (pipeline/data/eval/eval.jsonl)",
        "sha256": inputs["data"]["sha256"],
        "texts": len(texts),
        "windows": rows["windows"],
        "tokens": rows["baseline"].tokens,
        "max_len": spec.max_len,
        "calibration_texts": len(calib),
        "calibration_sha256": sha256_json(calib) if calib else None,  # == the convert manifest's calibration.sha256
    }
    result = EvaluateResult(
        model=model_name,
        hf_dir=hf_dir,
        dataset=dataset,
        baseline=rows["baseline"],
        formats=tuple(rows["formats"]),
        max_delta=spec.max_delta,
        passed=True,
        failed=(),
        report_dir=report_dir,
        reports={},
        inputs_hash=inputs_hash,
    )
    result = apply_gate(result, spec.max_delta)
    with atomic_dir(report_dir) as tmp:
        reports = write_reports(result, tmp)
        result = result.model_copy(update={"reports": {k: report_dir / p.name for k, p in reports.items()}})
        write_json_atomic(tmp / f"{REPORT_STEM}.json", result.model_dump(mode="json"))
        manifest = build_manifest(
            stage="evaluate",
            inputs=inputs,
            inputs_hash=inputs_hash,
            folder=tmp,
            started=started,
            packages=_PACKAGES,
            extra={"model": model_name, "hf_dir": str(hf_dir)},
        )
        write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return result


def place_evaluation(spec: EvaluateSpec, hf_dir: Path, model_name: str, texts: int) -> Placement:
    """Where the baseline and the variants run (pipeline.placement), from config.json alone: fp32
    weights, one scoring batch of max_len tokens per forward pass, baseline plus one pass per variant."""
    from pipeline.placement import model_shape, place
    from pipeline.resources import machine

    quantized = [v for v in spec.variants if v.fmt.modelopt_config is not None or v.kv.kv_cache_quant_algo is not None]
    job = Job(kind="evaluate", load_dtype=BASELINE_DTYPE, quant=(quantized or list(spec.variants))[0].fmt.name,
              quantized=bool(quantized), samples=texts, seq_len=spec.max_len, batch_size=spec.batch_size,
              passes=1 + len(spec.variants))
    return place(model_shape(hf_dir), job, machine(), spec.device, name=model_name)


def _measure(spec: EvaluateSpec, hf_dir: Path, texts: list[str], calib: list[str], placement: Placement | None = None) -> dict[str, Any]:
    from pipeline.quantize import calibration_steps, load_hf_model

    batch_size = placement.batch_size if placement is not None else spec.batch_size
    spec = spec.model_copy(update={"batch_size": batch_size})
    with OUT.progress() as bar:
        t0 = time.time()
        base_model, tokenizer = load_hf_model(hf_dir, BASELINE_DTYPE, placement)
        windows = token_windows(tokenizer, texts, spec.max_len)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        task = bar.add_task(f"baseline ({BASELINE_DTYPE})", total=len(windows))
        base_score, base_preds = score_model(
            base_model, windows, batch_size=spec.batch_size, pad_id=pad_id, progress=lambda n: bar.advance(task, n)
        )
        del base_model
        gc.collect()
        baseline = FormatResult(
            name="baseline",
            quant=BASELINE_DTYPE,
            kv_cache="auto",
            simulation=f"unquantized checkpoint, {BASELINE_DTYPE} on the CPU",
            perplexity=base_score.perplexity,
            delta=0.0,
            top1_agreement=1.0,
            top1_accuracy=base_score.top1_accuracy,
            tokens=base_score.tokens,
            eval_s=round(time.time() - t0, 3),
        )
        formats = []
        for variant in spec.variants:
            steps = calibration_steps(variant.fmt, variant.kv, len(calib), spec.batch_size)
            qtask = bar.add_task(f"{variant.name}: {'calibrate' if steps else 'load'}", total=max(steps, 1))
            t0 = time.time()
            model, _ = simulated_model(
                hf_dir,
                variant,
                calib,
                calib_max_len=spec.calib_max_len,
                batch_size=spec.batch_size,
                progress=lambda _done, _total: bar.advance(qtask),
                placement=placement,
            )
            bar.update(qtask, completed=max(steps, 1))
            quantize_s = time.time() - t0
            etask = bar.add_task(f"{variant.name}: score", total=len(windows))
            t0 = time.time()
            with count_kv_quantizer_calls(model) as kv_counts:
                score, _ = score_model(
                    model,
                    windows,
                    reference=base_preds,
                    batch_size=spec.batch_size,
                    pad_id=pad_id,
                    progress=lambda n: bar.advance(etask, n),
                )
            formats.append(_format_row(variant, score, baseline, kv_counts, quantize_s, time.time() - t0))
            del model
            gc.collect()
    return {"baseline": baseline, "formats": formats, "windows": len(windows)}


def _format_row(
    variant: Variant, score: Score, baseline: FormatResult, kv_counts: dict[str, int], quantize_s: float, eval_s: float
) -> FormatResult:
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
    if not math.isfinite(value):
        return float("inf")
    return value / baseline - 1.0


# ----------------------------------------------------------------------------------------------
# Gate


def apply_gate(result: EvaluateResult, max_delta: float) -> EvaluateResult:
    """Mark each format passed/failed against max_delta (relative perplexity rise over the baseline)."""
    formats = tuple(f.model_copy(update={"passed": f.delta <= max_delta}) for f in result.formats)
    failed = tuple(f.name for f in formats if not f.passed)
    return result.model_copy(update={"formats": formats, "failed": failed, "passed": not failed, "max_delta": max_delta})


def check_gate(result: EvaluateResult) -> None:
    """Raise GateFailedError (exit 4) with a table of the formats whose perplexity rose too much."""
    if result.passed:
        return
    lines = [f"{'format':<18} {'perplexity':>11} {'delta':>9} {'allowed':>9}"]
    for row in result.formats:
        if not row.passed:
            lines.append(
                f"{row.name:<18} {row.perplexity:>11.3f} {_pct(row.delta):>9} {_pct(result.max_delta):>9}"
            )
    raise GateFailedError(
        f"Accuracy gate failed for {len(result.failed)} of {len(result.formats)} format(s) "
        f"(baseline perplexity {result.baseline.perplexity:.3f}):\n" + "\n".join(lines),
        hint=f"Ship a format that passed, calibrate with more data (--calib-size), or allow more with --max-delta "
        f"(reports: {result.report_dir}).",
    )


# ----------------------------------------------------------------------------------------------
# Reports


TABLE_COLUMNS = ("format", "KV cache", "perplexity", "delta", "top-1 agreement", "top-1 accuracy", "KV measured", "gate")


def table_rows(result: EvaluateResult) -> list[list[str]]:
    rows = []
    for row in result.rows():
        is_base = row.name == "baseline"
        rows.append(
            [
                f"baseline ({row.quant})" if is_base else row.name,
                row.kv_cache,
                f"{row.perplexity:.3f}",
                "-" if is_base else _pct(row.delta),
                f"{row.top1_agreement:.4f}",
                f"{row.top1_accuracy:.4f}",
                "-" if row.kv_measured is None else ("yes" if row.kv_measured else "NO"),
                "-" if is_base else ("pass" if row.passed else "FAIL"),
            ]
        )
    return rows


def markdown_table(result: EvaluateResult) -> str:
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(result)]
    return "\n".join(lines)


def markdown_report(result: EvaluateResult) -> str:
    data = result.dataset
    parts = [
        f"# Quantization accuracy: {result.model}",
        "",
        f"- checkpoint: `{result.hf_dir}`",
        f"- evaluation data: {data['name']} ({data['texts']} texts, {data['windows']} windows of <= {data['max_len']} "
        f"tokens, {data['tokens']} scored tokens)",
        f"- calibration texts: {data['calibration_texts']}",
        f"- gate: perplexity may rise at most {_pct(result.max_delta)} over the baseline -> "
        f"**{'PASSED' if result.passed else 'FAILED: ' + ', '.join(result.failed)}**",
        "",
        markdown_table(result),
        "",
        "How each row was computed:",
        "",
    ]
    parts += [f"- {row.name}: {row.simulation}" + (f" ({row.note})" if row.note else "") for row in result.rows()]
    parts += [
        "",
        "Perplexity = exp(mean next-token negative log-likelihood); top-1 agreement = share of positions where the "
        "format's most likely next token equals the baseline's; top-1 accuracy = share where it equals the text's.",
        "",
    ]
    return "\n".join(parts)


def write_reports(result: EvaluateResult, folder: Path) -> dict[str, Path]:
    """evaluate.csv, evaluate.md and evaluate.png into folder (the JSON is written by the caller)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    fields = ["name", "quant", "kv_cache", "perplexity", "delta", "top1_agreement", "top1_accuracy", "tokens",
              "kv_measured", "passed", "quantize_s", "eval_s", "simulation", "note"]
    writer.writerow(fields)
    for row in result.rows():
        values = row.model_dump()
        writer.writerow(["" if values[f] is None else values[f] for f in fields])
    paths = {
        "json": folder / f"{REPORT_STEM}.json",
        "csv": folder / f"{REPORT_STEM}.csv",
        "markdown": folder / f"{REPORT_STEM}.md",
        "plot": folder / f"{REPORT_STEM}.png",
    }
    write_text_atomic(paths["csv"], buffer.getvalue())
    write_text_atomic(paths["markdown"], markdown_report(result))
    plot_result(result, paths["plot"])
    return paths


def plot_result(result: EvaluateResult, path: Path) -> None:
    """Two bar charts: perplexity per format (with the gate's limit) and top-1 agreement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows()
    names = [f"baseline\n({r.quant})" if r.name == "baseline" else r.name.replace("+", "\n+") for r in rows]
    colors = ["#7f7f7f"] + ["#2ca02c" if r.passed else "#d62728" for r in rows[1:]]
    ppl = [r.perplexity if math.isfinite(r.perplexity) else float("nan") for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(rows) + 4), 4.5))
    left.bar(names, ppl, color=colors)
    limit = result.baseline.perplexity * (1 + result.max_delta)
    left.axhline(limit, color="#d62728", linestyle="--", linewidth=1, label=f"gate: +{result.max_delta:.0%}")
    left.axhline(result.baseline.perplexity, color="#7f7f7f", linestyle=":", linewidth=1, label="baseline")
    left.set_ylabel("perplexity (lower is better)")
    left.set_title("Perplexity")
    left.legend(loc="upper left", fontsize=8)
    for x, value in enumerate(ppl):
        if math.isfinite(value):
            left.annotate(f"{value:.2f}", (x, value), ha="center", va="bottom", fontsize=8)
    agreement = [r.top1_agreement for r in rows]
    right.bar(names, agreement, color=colors)
    right.set_ylim(max(0.0, min(0.5, min(agreement) - 0.05)), 1.06)
    right.set_ylabel("top-1 agreement with baseline")
    right.set_title("Next-token agreement")
    for x, value in enumerate(agreement):
        right.annotate(f"{value:.3f}", (x, value), ha="center", va="bottom", fontsize=8)
    for axis in (left, right):
        axis.tick_params(axis="x", labelsize=8)
    figure.suptitle(f"{result.model}: {result.dataset['tokens']} tokens, simulated quantization on the CPU", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _pct(value: float) -> str:
    return "inf" if not math.isfinite(value) else f"{value * 100:+.2f}%"


# ----------------------------------------------------------------------------------------------
# Checkpoint manifest


def checkpoint_manifest(checkpoint_dir: Path) -> dict[str, Any]:
    """checkpoint_dir's manifest, or InvalidInputError (checked before a long evaluation starts)."""
    manifest = read_manifest(Path(checkpoint_dir))
    if manifest is None:
        raise InvalidInputError(
            f"{checkpoint_dir} has no readable {MANIFEST_NAME}.",
            hint="Give a checkpoint folder made by `pipeline convert` (build/<model>/checkpoints/<id>).",
        )
    return manifest


def record_in_manifest(checkpoint_dir: Path, result: EvaluateResult) -> dict[str, Any]:
    """Add the figures under "evaluation" in checkpoint_dir/manifest.json (the file inventory and
    inputs hash are untouched, so the checkpoint stays up to date). Returns what was recorded."""
    checkpoint_dir = Path(checkpoint_dir)
    manifest = checkpoint_manifest(checkpoint_dir)
    ours = result.dataset.get("calibration_sha256")
    theirs = (manifest.get("calibration") or {}).get("sha256")
    record = {
        "passed": result.passed,
        "max_delta": result.max_delta,
        "failed": list(result.failed),
        "dataset": {k: result.dataset[k] for k in ("name", "sha256", "texts", "tokens")},
        "baseline": {"dtype": result.baseline.quant, "perplexity": result.baseline.perplexity},
        "formats": {
            row.name: {
                "perplexity": row.perplexity,
                "delta": row.delta,
                "top1_agreement": row.top1_agreement,
                "kv_measured": row.kv_measured,
                "passed": row.passed,
            }
            for row in result.formats
        },
        "report_dir": str(result.report_dir),
        "inputs_hash": result.inputs_hash,
        # True: the figures come from the same calibration texts that made this checkpoint
        "calibration_matches_checkpoint": None if not (ours and theirs) else ours == theirs,
    }
    manifest["evaluation"] = record
    write_json_atomic(checkpoint_dir / MANIFEST_NAME, manifest)
    return record


__all__ = [
    "EvaluateResult",
    "EvaluateSpec",
    "FormatResult",
    "Score",
    "Variant",
    "check_gate",
    "checkpoint_manifest",
    "evaluate",
    "load_eval_texts",
    "record_in_manifest",
    "score_model",
]

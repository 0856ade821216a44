"""The quantization accuracy gate: what each precision costs in perplexity before it ships.

For the unquantized baseline and each requested format, the model is scored on an evaluation text
set (shipped in `pipeline/data/eval/`, distinct from the calibration set, or the user's .txt/.jsonl):
perplexity and top-1 agreement with the baseline (`pipeline.evaluate.scoring`).

Quantized formats run ModelOpt's simulated ("fake") quantization on the CPU, produced by the same
`pipeline.quantization.modelopt.quantize_model` (same configs, same calibration data) that makes the exported
TensorRT-LLM checkpoint: weights and activations are rounded to the format's grid and scales, the
arithmetic stays fp32. The baseline is the checkpoint in fp32 on the CPU (CPU fp16 matmuls are slow
and not what a GPU does either); the `fp16`/`bf16` rows round the weights to that dtype.

KV-cache quantization (`--kv-cache fp8|int8`) uses ModelOpt's attention `k_bmm_quantizer` /
`v_bmm_quantizer`; whether they actually ran during scoring is counted, not assumed, and a row
says `kv_measured: false` when they did not.

A format fails the gate when its perplexity rises more than `max_delta` (relative) over the
baseline (`pipeline.evaluate.gate`); `evaluate` still writes every report (`pipeline.evaluate.report`,
cached by `pipeline.evaluate.cache`), then the caller raises `GateFailedError` (exit 4) via
`check_gate`. Recording the figures in a checkpoint's manifest is the job's (`pipeline.jobs`).

One room per concern:
  evaluate_spec.py     EvaluateSpec (the frozen options), FormatResult, EvaluateResult
  evaluate_scoring.py  evaluation texts, token windows, perplexity and top-1 scoring, one row
  evaluate_gate.py     apply_gate, check_gate
  evaluate_report.py   the table, Markdown, CSV and PNG
  evaluate_cache.py    the inputs hash and the stored report folder
  evaluate.py          evaluate(spec): all of the above in order
"""

from __future__ import annotations

import gc
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from pipeline.core.artifacts import read_manifest, sha256_json
from pipeline.core.errors import InvalidInputError
from pipeline.evaluate.cache import cached_result, evaluation_inputs, report_dir_for, store_result
from pipeline.evaluate.gate import apply_gate
from pipeline.evaluate.scoring import (
    EVAL_DATA,
    format_row,
    load_eval_texts,
    score_model,
    token_windows,
)
from pipeline.evaluate.spec import EvaluateResult, EvaluateSpec, FormatResult
from pipeline.core.paths import model_slug
from pipeline.placement import Job, Placement
from pipeline.core.reporting import SILENT, Reporter
from pipeline.quantization.simulated import (
    BASELINE_DTYPE,
    calibration_texts,
    count_kv_quantizer_calls,
    simulated_model,
)


def resolve_model(model: str, reporter: Reporter = SILENT) -> tuple[Path, str]:
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

    result = download(DownloadSpec(source=model), reporter)  # a no-op when the checkpoint is already there
    return result.path, result.model


def evaluate(spec: EvaluateSpec, reporter: Reporter = SILENT) -> EvaluateResult:
    """Measure the baseline and every variant; write JSON, CSV, Markdown and a PNG plot into
    `<reports>/evaluate-<id>/`. Same inputs again: the stored figures are reused (the gate is
    re-applied with this spec's max_delta). Does not raise on a failed gate: see `pipeline.evaluate.gate.check_gate`."""
    started = time.time()
    hf_dir, model_name = resolve_model(spec.model, reporter)
    data_path = Path(spec.data).expanduser().resolve() if spec.data else EVAL_DATA
    texts = load_eval_texts(data_path)
    if spec.max_texts:
        texts = texts[: spec.max_texts]
    needs_calib = any(v.fmt.needs_calibration or v.kv.kv_cache_quant_algo for v in spec.variants)
    calib = calibration_texts(spec.calib_size, spec.calib_data) if needs_calib else []

    inputs = evaluation_inputs(spec, hf_dir, data_path, calib)
    inputs_hash = sha256_json(inputs)
    report_dir = report_dir_for(spec, model_name, inputs_hash)
    stored = None if spec.force else cached_result(report_dir, inputs_hash)
    if stored is not None:
        return apply_gate(stored, spec.max_delta)

    placement = place_evaluation(spec, hf_dir, model_name, len(texts))
    if placement.warning:
        reporter.warn(placement.warning)
    with redirect_stdout(sys.stderr):  # ModelOpt prints its progress to stdout; keep stdout for results
        rows = _measure(spec.model_copy(update={"batch_size": placement.batch_size}), hf_dir, texts, calib, placement, reporter)
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
    return store_result(apply_gate(result, spec.max_delta), inputs, started)


def place_evaluation(spec: EvaluateSpec, hf_dir: Path, model_name: str, texts: int) -> Placement:
    """Where the baseline and the variants run (pipeline.placement), from config.json alone: fp32
    weights, one scoring batch of max_len tokens per forward pass, baseline plus one pass per variant."""
    from pipeline.placement import model_shape, place
    from pipeline.core.resources import machine

    quantized = [v for v in spec.variants if v.fmt.modelopt_config is not None or v.kv.kv_cache_quant_algo is not None]
    job = Job(kind="evaluate", load_dtype=BASELINE_DTYPE, quant=(quantized or list(spec.variants))[0].fmt.name,
              quantized=bool(quantized), samples=texts, seq_len=spec.max_len, batch_size=spec.batch_size,
              passes=1 + len(spec.variants))
    return place(model_shape(hf_dir), job, machine(), spec.device, name=model_name)


def _measure(
    spec: EvaluateSpec, hf_dir: Path, texts: list[str], calib: list[str], placement: Placement | None, reporter: Reporter
) -> dict[str, Any]:
    """The baseline's row, then each variant's: simulated quantization (calibrated on calib), scored
    against the baseline's predictions."""
    from pipeline.quantization.modelopt import CalibrationRun, calibration_steps, load_hf_model

    with reporter.progress() as progress:
        t0 = time.time()
        base_model, tokenizer = load_hf_model(hf_dir, BASELINE_DTYPE, placement)
        windows = token_windows(tokenizer, texts, spec.max_len)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        task = progress.start(f"baseline ({BASELINE_DTYPE})", total=len(windows))
        base_score, base_preds = score_model(
            base_model, windows, batch_size=spec.batch_size, pad_id=pad_id, progress=lambda n: progress.advance(task, n)
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
            qtask = progress.start(f"{variant.name}: {'calibrate' if steps else 'load'}", total=max(steps, 1))
            t0 = time.time()
            model, _ = simulated_model(
                hf_dir,
                variant,
                CalibrationRun(
                    texts=tuple(calib),
                    batch_size=spec.batch_size,
                    max_len=spec.calib_max_len,
                    progress=lambda _done, _total: progress.advance(qtask),
                ),
                placement=placement,
            )
            progress.finish(qtask)
            quantize_s = time.time() - t0
            etask = progress.start(f"{variant.name}: score", total=len(windows))
            t0 = time.time()
            with count_kv_quantizer_calls(model) as kv_counts:
                score, _ = score_model(
                    model,
                    windows,
                    reference=base_preds,
                    batch_size=spec.batch_size,
                    pad_id=pad_id,
                    progress=lambda n: progress.advance(etask, n),
                )
            formats.append(format_row(variant, score, baseline, kv_counts, quantize_s, time.time() - t0))
            del model
            gc.collect()
    return {"baseline": baseline, "formats": formats, "windows": len(windows)}


__all__ = ["evaluate", "place_evaluation", "resolve_model"]

"""The convert stage's work: load the model where the placement says, quantize it with ModelOpt
(pipeline.quantization.modelopt), export it (a TensorRT-LLM checkpoint, or with format hf a unified HF checkpoint,
pipeline.convert.hf_export), and complete and check the TensorRT-LLM config.json the export wrote."""

from __future__ import annotations

import contextlib
import io
import json
import time
import warnings
from pathlib import Path
from typing import Any

from pipeline.convert import hf_export
from pipeline.quantization import modelopt as quantize
from pipeline.core.artifacts import write_json_atomic
from pipeline.convert.checkpoint_keys import check_checkpoint_config, complete_checkpoint_config
from pipeline.convert.spec import ConvertDecisions, ConvertSpec
from pipeline.core.deployable import HF_FORMAT
from pipeline.core.errors import StageFailedError
from pipeline.placement import Placement, batch_for_free_memory
from pipeline.core.quant import WEIGHTS_PACKED_AT_BUILD
from pipeline.quantization.modelopt import (
    CalibrationRun,
    calibration_steps,
    load_hf_model,
    prepare_for_export,
    quantize_model,
    torch_dtype,
)
from pipeline.core.reporting import Reporter


def quantize_and_export(
    plan: ConvertDecisions, spec: ConvertSpec, placement: Placement, tmp: Path, captured: io.StringIO, reporter: Reporter
) -> tuple[dict[str, float], dict[str, Any]]:
    """Load (where `placement` says), quantize (with a progress bar over calibration batches) and
    export into tmp; (timings, what the calibration used).

    ModelOpt prints to stdout; that goes into `captured` so --json output stays clean."""
    timings: dict[str, float] = {}
    texts = list(plan.calibration.texts) if plan.calibration else []
    with reporter.progress() as progress, contextlib.redirect_stdout(captured):
        task = progress.start("load", total=1)
        mark = time.time()
        model, tokenizer = load_hf_model(plan.hf_dir, plan.dtype, placement)
        timings["load"] = round(time.time() - mark, 3)
        progress.finish(task)

        batch_size = batch_for_free_memory(placement, quantize.free_gpu_memory() if placement.device == "cuda" else {})
        steps = calibration_steps(plan.fmt, plan.kv, len(texts), batch_size)
        task = progress.start(f"calibrate {plan.fmt.name}", total=max(steps, 1))

        def advance(_index: int, _total: int) -> None:
            progress.advance(task)

        stats: dict[str, int] = {}
        mark = time.time()
        calibration = CalibrationRun(texts=tuple(texts), batch_size=batch_size, max_len=spec.calib_max_len, tp=spec.tp,
                                     progress=advance)
        model = quantize_model(model, tokenizer, plan.fmt, plan.kv, calibration, stats=stats)
        timings["quantize"] = round(time.time() - mark, 3)
        progress.finish(task)

        hf = plan.format == HF_FORMAT
        task = progress.start("export hf" if hf else f"export tp{spec.tp} pp{spec.pp}", total=1)
        mark = time.time()
        import torch
        from modelopt.torch.export import export_tensorrt_llm_checkpoint

        del tokenizer
        prepare_for_export(model, on_gpus=placement.device == "cuda")
        if hf:
            hf_export.export(model, torch_dtype(plan.dtype), tmp)
        else:
            with torch.inference_mode():
                export_tensorrt_llm_checkpoint(
                    model, plan.decoder_type, torch_dtype(plan.dtype), export_dir=tmp,
                    inference_tensor_parallel=spec.tp, inference_pipeline_parallel=spec.pp,
                )
        timings["export"] = round(time.time() - mark, 3)
        progress.finish(task)
    del model
    used = {"batch_size_used": batch_size, "oom_splits": stats.get("splits", 0)}
    if hf:
        return timings, used
    expected = spec.tp * spec.pp
    ranks = sorted(tmp.glob("rank*.safetensors"))
    if len(ranks) != expected or not (tmp / "config.json").is_file():
        raise StageFailedError(
            f"ModelOpt wrote {len(ranks)} rank files (expected {expected}) and "
            f"{'a' if (tmp / 'config.json').is_file() else 'no'} config.json.",
            hint="Re-run with --debug; this is a ModelOpt export problem.",
        )
    return timings, used


def finish_config(path: Path, plan: ConvertDecisions) -> tuple[dict[str, Any], list[str]]:
    """Complete what ModelOpt's export leaves out or gets wrong, then check the result against what
    TensorRT-LLM's model class reads (pipeline/data/trtllm_checkpoint_keys.tsv); (config, changes).

    - int4_wo: ModelOpt has no TensorRT-LLM export for per-channel INT4 weight-only, so (as
      TensorRT-LLM's quantize script does) the weights stay 16-bit and quant_algo says W4A16;
      trtllm-build quantizes them when it loads the checkpoint.
    - a 16-bit format with no KV quantization has quant_algo and kv_cache_quant_algo null.
    - the keys the HF config decides (qwen_type, rotary_base, rotary_scaling, GPT-2's learned position
      embedding, ...) are set from it on every export path: ModelOpt's own config writer (no
      TensorRT-LLM installed) leaves qwen_type out and gives GPT-2 RoPE; TensorRT-LLM's
      from_hugging_face under transformers 5 falls back to rotary_base 10000 and copies
      `rope_parameters` as rotary_scaling {"rope_type": "default"}, which TensorRT-LLM rejects.
    - an empty per-layer quant_cfg.json is removed.

    A config TensorRT-LLM would still reject or read differently is refused (InvalidInputError, naming the key).
    """
    config = json.loads(path.read_text(encoding="utf-8"))
    quantization = config.setdefault("quantization", {})
    if plan.fmt.name in WEIGHTS_PACKED_AT_BUILD:
        quantization["quant_algo"] = WEIGHTS_PACKED_AT_BUILD[plan.fmt.name]
    elif not plan.fmt.is_quantized:
        quantization["quant_algo"] = None
    if plan.kv.kv_cache_quant_algo is None:
        quantization["kv_cache_quant_algo"] = None
    changes = complete_checkpoint_config(config, plan.hf_config, plan.rope)
    check_checkpoint_config(config, plan.hf_config, plan.rope)
    write_json_atomic(path, config)
    drop_empty_layer_config(path.parent / "quant_cfg.json")
    return config, changes


def drop_empty_layer_config(path: Path) -> None:
    """ModelOpt writes quant_cfg.json (per-layer formats, read by TensorRT-LLM only for
    MIXED_PRECISION) whenever its layer map exists, even empty; an empty one says nothing."""
    if not path.is_file():
        return
    try:
        layers = json.loads(path.read_text(encoding="utf-8")).get("quantized_layers")
    except (OSError, ValueError, AttributeError):
        return
    if not layers:
        path.unlink()


# Warnings that say nothing about this checkpoint: ModelOpt warns "Enable lm_head quantization"
# whenever the lm_head's (disabled) quantizers exist; torch warns about its own deprecations.
_NOISE = ("Enable lm_head quantization", "torch.jit")


def warnings_worth_keeping(caught: list[warnings.WarningMessage]) -> list[str]:
    messages = {str(w.message).strip().splitlines()[0][:200] for w in caught}
    return sorted(m for m in messages if m and not any(noise in m for noise in _NOISE))

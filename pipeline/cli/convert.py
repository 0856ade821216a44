"""`pipeline convert`: an HF checkpoint (or download source) into a TensorRT-LLM checkpoint, or with
--format hf into a ModelOpt unified HF checkpoint for TensorRT-LLM's PyTorch backend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.quantization.calibration import DEFAULT_CALIB_SIZE
from pipeline.cli._options import (
    DeviceOpt, ForceOpt, JsonOpt, KvCacheOpt, PpOpt, QuantOpt, TpOpt, set_json, spec_from_options,
)
from pipeline.core.output import OUT
from pipeline.core.reporting import OutputReporter

ModelOpt = Annotated[
    str,
    typer.Option("--model", help="HF checkpoint folder, or a download source: hf:org/name, local:PATH, gguf:FILE, demo."),
]
OptionalGpuOpt = Annotated[
    Optional[str],
    typer.Option("--gpu", help="GPU key from `pipeline gpus`: refuses a precision it cannot run (default: no check)."),
]
CalibDataOpt = Annotated[
    Optional[Path],
    typer.Option("--calib-data", help="Calibration .txt (one sample per line), .jsonl (`text` field) or dataset folder "
                 "(default: the shipped set)."),
]
CalibSizeOpt = Annotated[int, typer.Option("--calib-size", min=1, help="Number of calibration samples to use.")]
CalibMaxLenOpt = Annotated[int, typer.Option("--calib-max-len", min=8, help="Tokens per calibration sample (longer ones are cut).")]
CalibBatchOpt = Annotated[
    int, typer.Option("--calib-batch-size", min=0, help="Calibration samples per forward pass, capped by the memory left "
                      "after the weights; 0 = as many as fit.")
]
DtypeOpt = Annotated[
    Optional[str], typer.Option("--dtype", help="float16 or bfloat16: unquantized layers and activations (default float16).")
]

FormatOpt = Annotated[
    str,
    typer.Option("--format", help="trtllm: TensorRT-LLM checkpoint for trtllm-build (default); hf: ModelOpt unified HF "
                 "checkpoint for TensorRT-LLM's PyTorch backend (fp16, bf16, fp8, nvfp4, int4_awq, w4a8_awq; KV auto or fp8)."),
]

LoraOpt = Annotated[
    Optional[list[str]],
    typer.Option("--lora", help="A PEFT adapter folder, as PATH or NAME=PATH (digits: the task id; repeat per adapter): "
                 "converted into NVIDIA's format in <checkpoint>/lora/<task_id>/, in the checkpoint's dtype."),
]


def _where(device: Optional[str]) -> str:
    return {"cpu": " on the CPU", "cuda": " on the GPUs"}.get(device or "", "")


def register(app: typer.Typer) -> None:
    app.command("convert")(convert)


def convert(
    model: ModelOpt,
    quant: QuantOpt = "fp16",
    kv_cache: KvCacheOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    gpu: OptionalGpuOpt = None,
    calib_data: CalibDataOpt = None,
    calib_size: CalibSizeOpt = DEFAULT_CALIB_SIZE,
    calib_max_len: CalibMaxLenOpt = 256,
    calib_batch_size: CalibBatchOpt = 4,
    dtype: DtypeOpt = None,
    device: DeviceOpt = "auto",
    force: ForceOpt = False,
    checkpoint_format: FormatOpt = "trtllm",
    lora: LoraOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Quantize with NVIDIA ModelOpt and export a TensorRT-LLM checkpoint (or, with --format hf, a ModelOpt
    unified HF checkpoint) to build/<model>/checkpoints/<id>/.

    Same inputs again is a no-op; --force redoes it.
    """
    set_json(json_output)
    from pipeline.convert import ConvertSpec, convert as run_convert

    spec = spec_from_options(  # the spec checks --dtype and --device
        ConvertSpec, model=model, quant=quant, kv_cache=kv_cache, tp=tp, pp=pp, gpu=gpu, calib_data=calib_data,
        calib_size=calib_size, calib_max_len=calib_max_len, calib_batch_size=calib_batch_size, dtype=dtype,
        device=device, force=force, format=checkpoint_format, lora=tuple(lora or ()),
    )
    result = run_convert(spec, OutputReporter())
    if result.skipped:
        OUT.info(f"up to date: {result.path} (same inputs, files intact; --force redoes it)")
    verb = "kept" if result.skipped else "wrote"
    algo = result.quant_algo or result.dtype
    kv = f", KV {result.kv_cache_quant_algo}" if result.kv_cache_quant_algo else ""
    files = "HF checkpoint" if result.format == "hf" else f"{result.ranks} rank file(s)"
    OUT.result(
        result,
        text=f"{verb} {result.model}/{result.ckpt_id}: {algo}{kv}, {files}, "
        f"{result.bytes / (1 << 20):.1f} MiB in {result.duration_s:.1f} s{_where(result.device)} "
        f"-> {result.path}",
    )

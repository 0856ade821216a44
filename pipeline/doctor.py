"""`pipeline doctor`: what this machine has (GPUs, driver, CUDA, TensorRT-LLM, Triton, disk) and
which runtimes can run here."""

from __future__ import annotations

import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import PipelineError
from pipeline.core.host import GpuFound, detect_gpus
from pipeline.core.paths import build_root
from pipeline.serve.triton_binary import find_tritonserver
from pipeline.core.versions import TRITON_IMAGE, TRTLLM_VERSION


class Tool(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    present: bool
    version: str | None = None
    where: str | None = None


class SizeVerdict(BaseModel):
    """Whether this machine can convert and serve a model of one size (a public Llama-shaped config)."""

    model_config = ConfigDict(frozen=True)

    model: str
    params_b: float
    convert: dict[str, str]  # quant -> "GPU", "CPU ~N min" or "no: needs N GiB"
    serve: str  # the smallest precision and tp that fit the GPUs, or the reference runtime on the CPU, or "no: ..."


class DoctorReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpus: list[GpuFound]
    gpu_source: str  # "nvml", "nvidia-smi" or "none"
    driver_version: str | None
    cuda_version: str | None
    tools: list[Tool]
    build_dir: Path
    free_disk_gib: float
    free_ram_gib: float = 0.0
    runtimes: dict[str, str]  # runtime -> "yes" or the reason it cannot run here
    sizes: list[SizeVerdict] = []  # which model sizes convert and serve here
    pinned: dict[str, str]
    summary: str


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _tools() -> list[Tool]:
    tools = []
    trtllm_build = shutil.which("trtllm-build")
    trtllm_version = _dist_version("tensorrt_llm", "tensorrt-llm")
    tools.append(Tool(name="trtllm-build", present=bool(trtllm_build), version=trtllm_version if trtllm_build else None,
                      where=trtllm_build))
    tools.append(Tool(name="tensorrt_llm", present=trtllm_version is not None, version=trtllm_version))
    try:
        binary = find_tritonserver()
        version = _dist_version("nvidia-pytriton") if binary.source == "nvidia-pytriton" else None
        tools.append(Tool(name="tritonserver", present=True, where=f"{binary.path} ({binary.source})",
                          version=f"bundled with nvidia-pytriton {version}" if version else None))
    except (ImportError, PipelineError):
        tools.append(Tool(name="tritonserver", present=False))
    for dist in ("torch", "transformers", "nvidia-modelopt", "tritonclient"):
        version = _dist_version(dist)
        tools.append(Tool(name=dist, present=version is not None, version=version))
    return tools


def _free_disk(path: Path) -> float:
    from pipeline.core.resources import free_disk_bytes

    return round(free_disk_bytes(path) / (1 << 30), 1)


# Public Llama-family shapes (each model's config.json on the Hub): hidden, MLP, layers, heads, KV heads,
# vocabulary, tied embeddings. The demo is SmolLM2-135M; the others are Llama 3.2 1B/3B and 3.1 8B/70B/405B.
ReferenceSize = tuple[str, int, int, int, int, int, int, bool]
REFERENCE_SIZES: tuple[ReferenceSize, ...] = (
    ("SmolLM2-135M (demo)", 576, 1536, 30, 9, 3, 49152, True),
    ("Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128256, True),
    ("Llama-3.2-3B", 3072, 8192, 28, 24, 8, 128256, True),
    ("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256, False),
    ("Llama-3.1-70B", 8192, 28672, 80, 64, 8, 128256, False),
    ("Llama-3.1-405B", 16384, 53248, 126, 128, 8, 128256, False),
)
SERVE_RAM_OVERHEAD_BYTES = 2 << 30  # tritonserver and its Python stubs beside the reference runtime's fp32 weights


def reference_shape(size: ReferenceSize) -> Any:
    name, hidden, mlp, layers, heads, kv, vocab, tied = size
    from pipeline.planner import model_spec_from_dict

    return model_spec_from_dict({"model_type": "llama", "hidden_size": hidden, "intermediate_size": mlp,
                                 "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
                                 "vocab_size": vocab, "tie_word_embeddings": tied}, name)


def size_verdicts(here: Any, gpus: list[GpuFound]) -> list[SizeVerdict]:
    """For each reference size: convert fp16 and fp8 (`--device auto`, the default calibration) and serve."""
    from pipeline.quantization.calibration import DEFAULT_CALIB_SIZE
    from pipeline.placement import Job, cpu_rates, duration_text, place

    rates = cpu_rates("float16", 2048, 8192) if not here.gpus else None
    verdicts = []
    for row in REFERENCE_SIZES:
        shape = reference_shape(row)
        convert: dict[str, str] = {}
        for quant in ("fp16", "fp8"):
            job = Job(kind="convert", load_dtype="float16", quant=quant, quantized=quant != "fp16",
                      samples=DEFAULT_CALIB_SIZE if quant != "fp16" else 0, seq_len=256, batch_size=4)
            try:
                placement = place(shape, job, here, "auto", rates=rates)
            except PipelineError:
                from pipeline.placement import cpu_need

                convert[quant] = f"no: needs {cpu_need(shape, job) / (1 << 30):.0f} GiB"
                continue
            if placement.device == "cuda":
                convert[quant] = "GPU" + (" (offloading)" if placement.offload_bytes else "")
            else:
                convert[quant] = f"CPU ~{duration_text(placement.estimate_s or 0)}"
        verdicts.append(SizeVerdict(model=shape.name, params_b=round(shape.param_count / 1e9, 2), convert=convert,
                                    serve=_serve_verdict(shape, here, gpus)))
    return verdicts


def _serve_verdict(shape: Any, here: Any, gpus: list[GpuFound]) -> str:
    """GPUs: the smallest precision (fp16, fp8, int4_awq) and tp (powers of 2 up to the GPU count) the
    planner fits at ISL 1024 / OSL 128; the CPU: the reference runtime's fp32 weights in free RAM."""
    from pipeline import planner
    from pipeline.core.gpus import get_gpu
    from pipeline.core.quant import kv_cache_format, quant_format

    keyed = [g for g in gpus if g.table_key]
    if keyed:
        gpu = get_gpu(keyed[0].table_key)
        tps = [tp for tp in (1, 2, 4, 8) if tp <= len(keyed)]
        for name in ("fp16", "fp8", "int4_awq"):
            fmt = quant_format(name)
            if not gpu.can_run(fmt):
                continue
            for tp in tps:
                if planner.memory_plan(planner.Scenario(shape, gpu, fmt, kv_cache_format(None), tp, 1024, 128)).fits:
                    return f"tensorrtllm: {name} tp{tp}"
        return f"no: does not fit {len(keyed)} x {gpu.key} at int4_awq"
    need = shape.param_count * 4 + SERVE_RAM_OVERHEAD_BYTES
    if need <= here.free_ram_bytes:
        return f"reference runtime (CPU, fp32: {need / (1 << 30):.1f} GiB)"
    return f"no: the reference runtime needs {need / (1 << 30):.0f} GiB of RAM, {here.free_ram_bytes / (1 << 30):.0f} free"


def doctor() -> DoctorReport:
    gpus, source, driver, cuda = detect_gpus()
    tools = {t.name: t for t in _tools()}
    runtimes: dict[str, str] = {}
    triton = tools["tritonserver"].present
    if not gpus:
        runtimes["tensorrtllm"] = "no: no NVIDIA GPU (NVML and nvidia-smi found none)"
    elif not tools["trtllm-build"].present or not tools["tensorrt_llm"].present:
        runtimes["tensorrtllm"] = f"no: TensorRT-LLM is not installed (use the image {TRITON_IMAGE})"
    elif not triton:
        runtimes["tensorrtllm"] = "no: tritonserver not found"
    else:
        runtimes["tensorrtllm"] = "yes"
    ready = triton and tools["torch"].present and tools["transformers"].present
    runtimes["reference"] = "yes" if ready else "no: needs tritonserver (nvidia-pytriton), torch and transformers"
    if runtimes["tensorrtllm"] == "yes":
        summary = f"GPU ready: {', '.join(g.table_key or g.name for g in gpus)} with TensorRT-LLM {tools['tensorrt_llm'].version}"
    elif runtimes["reference"] == "yes":
        summary = "CPU only: reference runtime" if not gpus else "GPU present but no TensorRT-LLM: reference runtime only"
    else:
        summary = "Nothing can serve here: install the pipeline (make install) or use the image"
    root = build_root()
    from pipeline.core.resources import machine

    here = machine()
    return DoctorReport(
        gpus=gpus, gpu_source=source, driver_version=driver, cuda_version=cuda, tools=list(tools.values()),
        build_dir=root, free_disk_gib=_free_disk(root), free_ram_gib=round(here.free_ram_bytes / (1 << 30), 1),
        runtimes=runtimes, sizes=size_verdicts(here, gpus),
        pinned={"trtllm": TRTLLM_VERSION, "image": TRITON_IMAGE}, summary=summary,
    )


def report_rows(report: DoctorReport) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for gpu in report.gpus:
        rows.append([f"GPU {gpu.index}", f"{gpu.name} ({gpu.memory_gib:g} GiB, SM {gpu.compute_capability or '?'}, "
                                         f"table key {gpu.table_key or '-'})"])
    if not report.gpus:
        rows.append(["GPUs", f"none ({report.gpu_source})"])
    rows.append(["driver / CUDA", f"{report.driver_version or '-'} / {report.cuda_version or '-'}"])
    for tool in report.tools:
        rows.append([tool.name, ("yes " + (tool.version or "") + (f" at {tool.where}" if tool.where else "")).strip()
                     if tool.present else "missing"])
    rows.append(["build dir", f"{report.build_dir} ({report.free_disk_gib:g} GiB free)"])
    rows.append(["free RAM", f"{report.free_ram_gib:g} GiB"])
    for runtime, state in report.runtimes.items():
        rows.append([f"runtime {runtime}", state])
    for size in report.sizes:
        convert = ", ".join(f"{quant} {verdict}" for quant, verdict in size.convert.items())
        rows.append([f"{size.model} ({size.params_b:g}B)", f"convert: {convert}; serve: {size.serve}"])
    rows.append(["pinned", f"TensorRT-LLM {report.pinned['trtllm']} in {report.pinned['image']}"])
    return rows

"""`pipeline doctor`: what this machine has (GPUs, driver, CUDA, TensorRT-LLM, Triton, disk) and
which runtimes can run here."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.errors import PipelineError
from pipeline.paths import build_root
from pipeline.versions import TRITON_IMAGE, TRTLLM_VERSION


class GpuFound(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    memory_gib: float
    compute_capability: str | None = None
    table_key: str | None = None  # the GPU table entry it matches, if any


class Tool(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    present: bool
    version: str | None = None
    where: str | None = None


class DoctorReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpus: list[GpuFound]
    gpu_source: str  # "nvml", "nvidia-smi" or "none"
    driver_version: str | None
    cuda_version: str | None
    tools: list[Tool]
    build_dir: Path
    free_disk_gib: float
    runtimes: dict[str, str]  # runtime -> "yes" or the reason it cannot run here
    pinned: dict[str, str]
    summary: str


def _normalize(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", label.lower().replace("nvidia", ""))


def match_table_key(name: str, memory_gib: float | None = None) -> str | None:
    """The GPU table key for a device name as NVML/nvidia-smi report it (e.g. 'NVIDIA H100 80GB HBM3')."""
    from pipeline.gpus import gpu_table

    wanted = _normalize(name)
    for gpu in gpu_table().values():
        if gpu.product_label and _normalize(gpu.product_label) == wanted:
            return gpu.key
    candidates = [g for g in gpu_table().values() if not g.is_cpu and g.key.split("-")[0] in wanted]
    if memory_gib and len(candidates) > 1:
        candidates.sort(key=lambda g: abs((g.memory_gib or 0) - memory_gib))
    return candidates[0].key if candidates else None


def _gpus_nvml() -> tuple[list[GpuFound], str | None, str | None] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU stack here
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / (1 << 30)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            found.append(GpuFound(index=index, name=name, memory_gib=round(memory, 1),
                                  compute_capability=f"{major}.{minor}", table_key=match_table_key(name, memory)))
        return found, str(driver.decode() if isinstance(driver, bytes) else driver), f"{cuda // 1000}.{cuda % 1000 // 10}"
    finally:
        pynvml.nvmlShutdown()


def _gpus_smi() -> tuple[list[GpuFound], str | None, str | None] | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,memory.total,compute_cap,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found, driver = [], None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        memory = float(parts[2]) / 1024
        found.append(GpuFound(index=int(parts[0]), name=parts[1], memory_gib=round(memory, 1),
                              compute_capability=parts[3], table_key=match_table_key(parts[1], memory)))
        driver = parts[4]
    return found, driver, None


def detect_gpus() -> tuple[list[GpuFound], str, str | None, str | None]:
    for source, probe in (("nvml", _gpus_nvml), ("nvidia-smi", _gpus_smi)):
        result = probe()
        if result is not None and result[0]:
            return result[0], source, result[1], result[2]
    return [], "none", None, None


def detect_gpu_key() -> str:
    """The GPU table key of this machine's first GPU, or "cpu" when there is none (for --gpu auto)."""
    gpus, *_ = detect_gpus()
    if not gpus:
        return "cpu"
    if gpus[0].table_key is None:
        from pipeline.errors import UnsupportedError

        raise UnsupportedError(f"This machine's GPU {gpus[0].name!r} is not in the GPU table.",
                               hint="Pass --gpu KEY for the closest entry (`pipeline gpus` lists them).")
    return gpus[0].table_key


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
        from pipeline.serve import find_tritonserver

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
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return round(shutil.disk_usage(probe).free / (1 << 30), 1)


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
    return DoctorReport(
        gpus=gpus, gpu_source=source, driver_version=driver, cuda_version=cuda, tools=list(tools.values()),
        build_dir=root, free_disk_gib=_free_disk(root), runtimes=runtimes,
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
    for runtime, state in report.runtimes.items():
        rows.append([f"runtime {runtime}", state])
    rows.append(["pinned", f"TensorRT-LLM {report.pinned['trtllm']} in {report.pinned['image']}"])
    return rows

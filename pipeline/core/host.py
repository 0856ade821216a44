"""This host's GPUs as NVML or nvidia-smi report them, matched to the GPU table (pipeline.core.gpus):
what `pipeline doctor` lists and what --gpu auto resolves to (serve, build, profiles, serve --api openai)."""

from __future__ import annotations

import re
import shutil
import subprocess

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import gpu_table


class GpuFound(BaseModel):
    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    memory_gib: float
    compute_capability: str | None = None
    table_key: str | None = None  # the GPU table entry it matches, if any


def _normalize(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", label.lower().replace("nvidia", ""))


def _family(key: str) -> str:
    """A table key's model name without its variant: its dash-separated parts up to the first with a digit ("h100-sxm" ->
    "h100", "rtx-pro-6000" -> "rtxpro6000"), so that "RTX 6000 Ada" is not taken for an RTX PRO 6000."""
    parts = []
    for part in key.split("-"):
        parts.append(part)
        if any(c.isdigit() for c in part):
            break
    return "".join(parts)


def match_table_key(name: str, memory_gib: float | None = None) -> str | None:
    """The GPU table key for a device name as NVML/nvidia-smi report it (e.g. 'NVIDIA H100 80GB HBM3')."""
    wanted = _normalize(name)
    for gpu in gpu_table().values():
        if gpu.product_label and _normalize(gpu.product_label) == wanted:
            return gpu.key
    candidates = [g for g in gpu_table().values() if not g.is_cpu and _family(g.key) in wanted]
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


def known_gpu_key() -> str | None:
    """The GPU table key of this machine's first GPU, "cpu" when there is none, None for a GPU the table
    does not know (for callers that only describe the machine)."""
    gpus, *_ = detect_gpus()
    return gpus[0].table_key if gpus else "cpu"


def detect_gpu_key() -> str:
    """The GPU table key of this machine's first GPU, or "cpu" when there is none (for --gpu auto)."""
    gpus, *_ = detect_gpus()
    if not gpus:
        return "cpu"
    if gpus[0].table_key is None:
        raise UnsupportedError(f"This machine's GPU {gpus[0].name!r} is not in the GPU table.",
                               hint="Pass --gpu KEY for the closest entry (`pipeline gpus` lists them).")
    return gpus[0].table_key

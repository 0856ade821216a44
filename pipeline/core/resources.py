"""What this machine has free right now: host memory (capped by the cgroup's limit), the memory of
each GPU torch can use, and disk. The memory pre-checks (pipeline.placement), download's and
convert's disk checks and `pipeline doctor` read it here, and tests replace these functions to
stand in for other machines.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import UnsupportedError

GIB = float(1 << 30)
_NO_LIMIT = 1 << 60  # cgroup v1 writes ~2^63 for "no limit"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


class GpuMemory(BaseModel):
    """One CUDA device as torch sees it (index = torch's device index)."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    free_bytes: int
    total_bytes: int

    @property
    def free_gib(self) -> float:
        return self.free_bytes / GIB


class Machine(BaseModel):
    """Free memory where a model could be placed, as measured at one moment."""

    model_config = ConfigDict(frozen=True)

    free_ram_bytes: int
    total_ram_bytes: int
    gpus: tuple[GpuMemory, ...] = ()
    cuda_note: str = ""  # why torch sees no GPU (a CPU build, no device), when it sees none
    cpus: int = 1


def machine() -> Machine:
    """This machine now: free RAM (cgroup-aware), torch's CUDA devices and their free memory, CPUs."""
    import psutil

    from pipeline.core.cpus import available_cpus

    gpus, note = cuda_devices()
    return Machine(free_ram_bytes=free_ram_bytes(), total_ram_bytes=int(psutil.virtual_memory().total),
                   gpus=tuple(gpus), cuda_note=note, cpus=available_cpus())


def cuda_devices() -> tuple[list[GpuMemory], str]:
    """(devices, note): every GPU torch can run on, with free and total memory from cudaMemGetInfo.
    The note says why the list is empty (torch built without CUDA, no device visible)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return [], "torch is not installed"
    if torch.version.cuda is None:
        return [], f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return [], "torch sees no CUDA device" + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
    found = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        found.append(GpuMemory(index=index, name=torch.cuda.get_device_name(index), free_bytes=int(free), total_bytes=int(total)))
    return found, ""


def free_ram_bytes() -> int:
    """Memory a new allocation can get without swapping: MemAvailable, or less when this process's
    cgroup has a limit (what is left of it, not counting reclaimable page cache)."""
    import psutil

    available = int(psutil.virtual_memory().available)
    left = cgroup_memory_left()
    return min(available, left) if left is not None else available


def cgroup_memory_left(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> Optional[int]:
    """limit - (usage - inactive file cache) of this process's memory cgroup, or None without a limit."""
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            for folder in (root / rel, root):
                limit = _read_int(folder / "memory.max")
                if limit is not None:
                    usage = _read_int(folder / "memory.current") or 0
                    return _left(limit, usage, _stat(folder / "memory.stat", "inactive_file"))
        elif "memory" in controllers.split(","):  # cgroup v1
            for folder in (root / "memory" / rel, root / "memory"):
                limit = _read_int(folder / "memory.limit_in_bytes")
                if limit is not None:
                    usage = _read_int(folder / "memory.usage_in_bytes") or 0
                    return _left(limit, usage, _stat(folder / "memory.stat", "total_inactive_file"))
    return None


def _left(limit: int, usage: int, inactive_file: int) -> Optional[int]:
    if limit >= _NO_LIMIT:
        return None
    return max(0, limit - max(0, usage - inactive_file))


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if text == "max":
        return _NO_LIMIT
    return int(text) if text.isdigit() else None


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def existing_parent(path: Path) -> Path:
    """path, or its nearest ancestor that exists (where a folder about to be made would live)."""
    probe = Path(path).expanduser().resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds (or will hold) path."""
    return int(shutil.disk_usage(existing_parent(path)).free)


def same_filesystem(a: Path, b: Path) -> bool:
    return existing_parent(a).stat().st_dev == existing_parent(b).stat().st_dev


DISK_MARGIN_BYTES = 256 << 20


def check_disk(target: Path, needed: int, *, what: str, free: int) -> None:
    """Refuse (exit 2) before writing when the filesystem of target lacks needed bytes (+ 5% and 256 MiB)."""
    wanted = int(needed * 1.05) + DISK_MARGIN_BYTES
    if free < wanted:
        raise UnsupportedError(
            f"Not enough disk for {what}: it needs about {needed / GIB:.2f} GiB, and {free / GIB:.2f} GiB is free on "
            f"the filesystem of {existing_parent(target)}.",
            hint=f"Free {max(0.01, (wanted - free) / GIB):.2f} GiB there, or point PIPELINE_BUILD_DIR at a disk with "
            f"{wanted / GIB:.1f} GiB free.",
        )

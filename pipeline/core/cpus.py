"""How many CPUs this process may really use: its CPU affinity and its cgroup's CPU quota, not the
node's core count (`os.cpu_count()` says 64 inside a pod limited to 2 CPUs, and torch then starts 64
spinning threads on 2 CPUs' worth of time).

- affinity: `os.sched_getaffinity(0)` (taskset, cpuset cgroups, Kubernetes' static CPU manager);
- quota: cgroup v2 `cpu.max` ("max 100000" or "200000 100000") or cgroup v1 `cpu.cfs_quota_us` /
  `cpu.cfs_period_us` (-1: none) of this process's cgroup and each of its ancestors (the smallest wins;
  Kubernetes CPU limits and `docker run --cpus` set these);
- $PIPELINE_CPU_LIMIT: whole CPUs, set in pods that `pipeline k8s render` writes from the container's
  CPU limit through the downward API (resourceFieldRef limits.cpu), for when the cgroup files are not
  readable in the container.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class CpuBudget:
    affinity: int  # CPUs this process may be scheduled on
    quota: float | None  # CPUs' worth of time per period the cgroup allows (None: no limit)
    source: str  # where the quota came from (a cgroup file), or "none"

    @property
    def cpus(self) -> int:
        """Whole CPUs usable at once: the affinity, capped by the quota (at least 1)."""
        limit = self.affinity if self.quota is None else min(self.affinity, math.floor(self.quota))
        return max(1, limit)


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_quota(text: str) -> float | None:
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(folder: Path) -> float | None:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _candidates(mount: Path, cgroup_path: str) -> list[Path]:
    """The process's cgroup folder and its ancestors under mount. Inside a container the path in
    /proc/self/cgroup may name the host's hierarchy while mount is the container's own root: then
    only the mount's root is there to read."""
    relative = Path(cgroup_path.lstrip("/"))
    folders = [mount / relative, *[mount / parent for parent in relative.parents]]
    return [folder for folder in dict.fromkeys(folders) if folder.is_dir()] or [mount]


def cgroup_cpu_quota(proc_cgroup: Path = PROC_CGROUP, cgroup_root: Path = CGROUP_ROOT) -> tuple[float | None, str]:
    """(CPUs' worth of quota, the file it came from) for this process's cgroup; (None, "none") without one."""
    text = _read(proc_cgroup)
    if text is None:
        return None, "none"
    best: tuple[float | None, str] = (None, "none")

    def consider(quota: float | None, where: Path) -> None:
        nonlocal best
        if quota is not None and (best[0] is None or quota < best[0]):
            best = (quota, str(where))

    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2 (unified)
            for folder in _candidates(cgroup_root, path):
                consider(_v2_quota(_read(folder / "cpu.max") or ""), folder / "cpu.max")
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own hierarchy
            for mount in (cgroup_root / controllers, cgroup_root / "cpu,cpuacct", cgroup_root / "cpu"):
                if mount.is_dir():
                    for folder in _candidates(mount, path):
                        consider(_v1_quota(folder), folder / "cpu.cfs_quota_us")
                    break
    return best


def cpu_budget(proc_cgroup: Path = PROC_CGROUP, cgroup_root: Path = CGROUP_ROOT) -> CpuBudget:
    quota, source = cgroup_cpu_quota(proc_cgroup, cgroup_root)
    return CpuBudget(affinity=_affinity(), quota=quota, source=source)


def env_cpu_limit() -> int | None:
    """$PIPELINE_CPU_LIMIT as whole CPUs (the downward API rounds limits.cpu up), None when unset."""
    value = os.environ.get("PIPELINE_CPU_LIMIT", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def available_cpus() -> int:
    """Whole CPUs this process can use at once (affinity capped by the cgroup quota and
    $PIPELINE_CPU_LIMIT, at least 1)."""
    cpus, limit = cpu_budget().cpus, env_cpu_limit()
    return min(cpus, limit) if limit else cpus


def reference_threads() -> int:
    """Torch threads for the reference runtime: $PIPELINE_REFERENCE_THREADS, else half the CPUs this
    process may use (available_cpus), at least 1.

    The server's other processes (Triton, the pre/postprocessing and BLS stubs, the clients of a test)
    share the machine; torch's OpenMP threads spin while they wait for each other, so on an oversubscribed
    2-core machine 2 threads decode ~3x slower than 1 (measured: 16 tokens in 6.0 s vs 1.9 s with three
    busy processes beside it; 0.6 s vs 0.9 s on an idle machine)."""
    value = os.environ.get("PIPELINE_REFERENCE_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return max(1, available_cpus() // 2)

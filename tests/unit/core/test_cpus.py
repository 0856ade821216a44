"""pipeline.core.cpus and the reference runtime's thread count: CPU affinity and cgroup quota, not the node's
cores. The affinity is set for real on a child process; the cgroup hierarchies are the files the kernel
shows (v2 cpu.max, v1 cfs quota/period) laid out in a folder, since a test cannot create cgroups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.cpus import CpuBudget, cgroup_cpu_quota, cpu_budget


def _v2(tmp_path: Path, limits: dict[str, str], path: str = "/kubepods/pod1/ctr") -> tuple[Path, Path]:
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{path}\n")
    root = tmp_path / "fs"
    for folder, cpu_max in limits.items():
        (root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / folder.lstrip("/") / "cpu.max").write_text(cpu_max + "\n")
    (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return proc, root


def test_v2_quota_of_the_process_cgroup(tmp_path: Path) -> None:
    proc, root = _v2(tmp_path, {"/kubepods/pod1/ctr": "150000 100000"})
    quota, source = cgroup_cpu_quota(proc, root)
    assert quota == 1.5 and source.endswith("kubepods/pod1/ctr/cpu.max")


def test_v2_the_smallest_limit_of_the_ancestors_wins(tmp_path: Path) -> None:
    proc, root = _v2(tmp_path, {"/kubepods/pod1/ctr": "max 100000", "/kubepods/pod1": "200000 100000",
                                "/kubepods": "800000 100000"})
    assert cgroup_cpu_quota(proc, root)[0] == 2.0


def test_v2_no_limit(tmp_path: Path) -> None:
    proc, root = _v2(tmp_path, {"/kubepods/pod1/ctr": "max 100000"})
    assert cgroup_cpu_quota(proc, root) == (None, "none")


def test_v2_container_sees_only_its_own_root(tmp_path: Path) -> None:
    """A container's /proc/self/cgroup may name the host's path while /sys/fs/cgroup is its own root."""
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/docker-abc.scope\n")
    root = tmp_path / "fs"
    root.mkdir()
    (root / "cpu.max").write_text("100000 100000\n")
    assert cgroup_cpu_quota(proc, root)[0] == 1.0


def test_v1_cfs_quota(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    folder = tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc"
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text("300000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(proc, tmp_path / "fs")[0] == 3.0
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(proc, tmp_path / "fs")[0] is None


def test_budget_is_the_affinity_capped_by_the_quota() -> None:
    assert CpuBudget(affinity=64, quota=2.0, source="x").cpus == 2
    assert CpuBudget(affinity=2, quota=8.0, source="x").cpus == 2
    assert CpuBudget(affinity=4, quota=1.5, source="x").cpus == 1
    assert CpuBudget(affinity=4, quota=0.5, source="x").cpus == 1  # never 0
    assert CpuBudget(affinity=3, quota=None, source="none").cpus == 3


def test_this_process(tmp_path: Path) -> None:
    budget = cpu_budget()
    assert budget.affinity == len(os.sched_getaffinity(0))
    assert 1 <= budget.cpus <= (os.cpu_count() or 1)


_THREADS = "from pipeline.core.cpus import reference_threads; print(reference_threads())"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_reference_threads_follow_the_affinity_and_the_override() -> None:
    """A child pinned to one CPU gets 1 thread whatever the node has; PIPELINE_REFERENCE_THREADS wins."""
    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_REFERENCE_THREADS"}
    one_cpu = {min(os.sched_getaffinity(0))}

    def threads(extra_env: dict[str, str]) -> int:
        out = subprocess.run([sys.executable, "-c", _THREADS], env={**env, **extra_env}, capture_output=True,
                             text=True, check=True, preexec_fn=lambda: os.sched_setaffinity(0, one_cpu))
        return int(out.stdout)

    assert threads({}) == 1
    assert threads({"PIPELINE_REFERENCE_THREADS": "3"}) == 3
    unpinned = subprocess.run([sys.executable, "-c", _THREADS], env=env, capture_output=True, text=True, check=True)
    assert int(unpinned.stdout) == max(1, cpu_budget().cpus // 2)

"""The CPU reference runtime as a planner target: the GPU table's "cpu" row has no figures, so the planner
measures this host now (memory bandwidth and float32 matmul rate, under a second, once per process) and
plans it like any GPU.

The reference runtime holds weights and KV cache in float32 while the planner counts 16-bit bytes
(precision fp16), so the bandwidth it is given is half the measured one: the same seconds per weight read.
Per-iteration Python costs are not in these figures; `pipeline plan --calibrate` with a bench of the
deployment fits them (planner/calibrate.py).
"""

from __future__ import annotations

import os
import time
from functools import lru_cache

from pipeline.core.gpus import GpuSpec, get_gpu

FLOAT32_PER_16BIT = 2.0  # bytes the reference runtime moves per byte the planner counts
# The reference runtime's build limits per goal: a small fixed batch, as `pipeline build --gpu cpu` builds it.
CPU_DEFAULTS = {"latency": {"max_batch_size": 4}, "throughput": {"max_batch_size": 16}}


def cpu_limits(build: dict, goal: str, isl: int) -> dict:
    """A recommended build as the reference runtime is built: CPU_DEFAULTS' batch, prompts in one chunk."""
    return {**build, **CPU_DEFAULTS[goal], "max_num_tokens": max(2048, isl)}


def _best(work, runs: int = 5) -> float:
    work()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return max(best, 1e-9)


@lru_cache(maxsize=1)
def cpu_figures() -> tuple[float, float, float]:
    """(bytes/s of a large copy counted read + write, float32 matmul FLOP/s, host memory GiB), measured now."""
    import numpy as np

    buffer = np.ones(32 * 1024 * 1024, dtype=np.float32)  # 128 MiB: far beyond the caches
    out = np.empty_like(buffer)
    copy_s = _best(lambda: np.copyto(out, buffer))
    a = np.random.default_rng(0).standard_normal((256, 1024), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((1024, 2048), dtype=np.float32)
    matmul_s = _best(lambda: a @ w)
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return 2 * buffer.nbytes / copy_s, 2.0 * 256 * 1024 * 2048 / matmul_s, memory_gib


def cpu_target() -> GpuSpec:
    """The "cpu" GPU entry with this host's figures filled in."""
    bandwidth, flops, memory_gib = cpu_figures()
    return get_gpu("cpu").model_copy(update={
        "memory_gib": round(memory_gib, 1),
        "hbm_bandwidth_tbps": bandwidth / FLOAT32_PER_16BIT / 1e12,
        "dense_bf16_tflops": flops / 1e12,
        "figures_note": f"measured on this host now: {bandwidth / 1e9:.1f} GB/s copy, {flops / 1e9:.1f} GFLOP/s float32",
    })


def plan_target(gpu: GpuSpec | str) -> GpuSpec:
    """The GPU as the planner plans it: the CPU with measured figures, any other GPU as in the table."""
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    return cpu_target() if spec.is_cpu and not spec.hbm_bandwidth_tbps else spec

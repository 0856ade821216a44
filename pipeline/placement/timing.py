"""How long a job takes on this CPU (pipeline.placement quotes it when --device auto falls back to the
CPU): two rates measured now in the load dtype, and the estimate built on them."""

from __future__ import annotations

import math
import time
from typing import Optional

from pipeline.placement.footprint import DTYPE_BYTES, Job
from pipeline.planner import ModelSpec
from pipeline.core.resources import GIB

# Load and export on the CPU, seconds per byte of weights (float16 1B model: load 0.5 s + export 8.9 s
# for 2.0 GiB on 2 busy cores, scripts/bench_scale.py; 4 s/GiB): the part of the time that is not matmuls.
CPU_IO_SECONDS_PER_BYTE = 4.0 / GIB


# ----------------------------------------------------------------------------------------------
# Time on the CPU


def cpu_seconds(model: ModelSpec, job: Job, batch: int, rates: Optional[tuple[float, float]] = None) -> float:
    """Wall time on this CPU, from two rates measured now in the load dtype (`cpu_rates`):

    - matmuls: 2 FLOPs per weight per token, up to samples x seq_len tokens per pass;
    - ModelOpt's max calibration: a min/max reduction over every weight in every forward pass
      (profiled: torch.max/min are a fifth of the demo's calibration on the CPU);
    - a fixed 20 s (ModelOpt's imports and quantizer insertion, the tokenizer) when ModelOpt runs,
      and loading plus export at CPU_IO_SECONDS_PER_BYTE of weights.
    Checked against measured runs by scripts/bench_scale.py (it prints both)."""
    matmul_rate, reduce_rate = rates if rates is not None else cpu_rates(job.load_dtype, model.hidden_size, model.intermediate_size)
    tokens = job.samples * job.seq_len * job.passes
    flops = 2.0 * (model.active_params_per_token + model.vocab_size * model.hidden_size) * tokens
    forwards = math.ceil(job.samples / max(1, batch)) * job.passes if job.samples else (1 if job.quantized else 0)
    reductions = 2.0 * model.param_count * forwards if job.quantized else 0.0
    fixed = 20.0 if job.quantized else 0.0
    io = model.param_count * DTYPE_BYTES.get(job.load_dtype, 2) * CPU_IO_SECONDS_PER_BYTE
    return round(flops / matmul_rate + reductions / reduce_rate + fixed + io, 1)


_RATES: dict[tuple[str, int, int], tuple[float, float]] = {}


def cpu_rates(dtype: str, hidden: int, intermediate: int) -> tuple[float, float]:
    """(matmul FLOP/s, reduction elements/s) this CPU does now in dtype: a (256 x hidden) @
    (hidden x intermediate) matmul, the calibration's shape, and abs-max plus min over that weight,
    ModelOpt's amax. Under a second; remembered for the process."""
    import torch

    h, i = min(hidden, 4096), min(intermediate, 8192)
    key = (dtype, h, i)
    if key not in _RATES:
        torch_dtype = getattr(torch, dtype)
        a = torch.randn(256, h).to(torch_dtype)
        w = torch.randn(i, h).to(torch_dtype)
        with torch.no_grad():
            matmul = _best_time(lambda: torch.nn.functional.linear(a, w))
            reduce = _best_time(lambda: (torch.max(w.abs()), torch.min(w)))
        _RATES[key] = (2.0 * 256 * h * i / matmul, float(w.numel()) / reduce)
    return _RATES[key]


def _best_time(work) -> float:
    work()
    best, spent, runs = math.inf, 0.0, 0
    while runs < 2 or (spent < 0.3 and runs < 10):
        started = time.perf_counter()
        work()
        took = time.perf_counter() - started
        best, spent, runs = min(best, took), spent + took, runs + 1
    return max(best, 1e-9)


def _estimate_basis(model: ModelSpec, job: Job, batch: int, rate: float) -> str:
    work = f"{job.samples} x {job.seq_len} tokens" + (f" x {job.passes} passes" if job.passes > 1 else "")
    what = f"{model.param_count / 1e9:.2f}B parameters, {work}" if job.samples else f"{model.param_count / 1e9:.2f}B parameters"
    return f"{what}, batch {batch}, at the {rate / 1e9:.1f} GFLOP/s this CPU does in {job.load_dtype} now"


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

"""Collectives as measured on silicon: TensorRT-LLM's custom all-reduce (TP's two per layer) and NCCL's all-gather and
reduce-scatter (attention data parallelism's gather and scatter around each MoE layer), from the perf database
NVIDIA's AIConfigurator ships (data/trtllm_allreduce_latency.tsv, data/nccl_collective_latency.tsv), and the log-log
interpolation every measured latency table of the planner shares (measured_at)."""

from __future__ import annotations

import bisect
import math
from functools import lru_cache

from pipeline.core.gpus import GpuSpec
from pipeline.data import packaged_fact_rows


@lru_cache(maxsize=1)
def _allreduce_table() -> dict[tuple[str, int], tuple[list[float], list[float]]]:
    """(gpu key, tp) -> (message elements, seconds), ascending: data/trtllm_allreduce_latency.tsv."""
    table: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for row in packaged_fact_rows("trtllm_allreduce_latency.tsv"):
        sizes, seconds = table.setdefault((row["gpu"], int(row["tp"])), ([], []))
        sizes.append(float(row["message_elements"]))
        seconds.append(float(row["latency_us"]) * 1e-6)
    for _, seconds in table.values():
        _never_faster(seconds)
    return table


def _never_faster(seconds: list[float]) -> list[float]:
    """Latencies of ascending message sizes, in place, each at most the next one's: a larger message is never faster, so a
    dip below is measurement noise."""
    for i in range(len(seconds) - 2, -1, -1):
        seconds[i] = min(seconds[i], seconds[i + 1])
    return seconds


def measured_allreduce_s(gpu: GpuSpec, tp: int, elements: float) -> float | None:
    """Seconds of one TensorRT-LLM custom all-reduce of `elements` 16-bit values over `tp` GPUs, interpolated
    (log-log) in the latencies measured on this GPU (data/trtllm_allreduce_latency.tsv); None where it has none.

    NVLink GPUs only: the custom all-reduce reads its peers' buffers over NVLink. The table's L40S figures (a PCIe
    system) run 10-50x the PCIe estimate (TP 8, 4M elements: 12.8 ms) and put the published L40S TP 2-8 rows at up to
    -88%: whatever system NVIDIA's L40S runs used moved the data far faster, so a PCIe GPU keeps the estimate."""
    found = _allreduce_table().get((gpu.key, tp)) if gpu.nvlink else None
    if not found or elements <= 0:
        return None
    return measured_at(*found, elements)


@lru_cache(maxsize=1)
def _collective_table() -> dict[tuple[str, str, str, int], tuple[list[float], list[float]]]:
    """(gpu key, op, dtype, GPUs) -> (message elements, seconds), ascending: data/nccl_collective_latency.tsv."""
    table = {}
    for row in packaged_fact_rows("nccl_collective_latency.tsv"):
        seconds = _never_faster([float(us) * 1e-6 for us in row["latency_us"].split(",")])
        table[(row["gpu"], row["op"], row["dtype"], int(row["num_gpus"]))] = (
            [float(m) for m in row["message_elements"].split(",")], seconds)
    return table


def measured_collective_s(gpu: GpuSpec, op: str, gpus: int, elements: float, dtype: str = "half") -> float | None:
    """Seconds of one NCCL all_gather or reduce_scatter over `gpus` GPUs of a tensor of `elements` elements (the whole
    gathered or reduced tensor; dtype half or int8), interpolated (log-log) in the latencies measured on this GPU
    (data/nccl_collective_latency.tsv); None where it has none."""
    found = _collective_table().get((gpu.key, op, dtype, gpus))
    if not found or elements <= 0:
        return None
    return measured_at(*found, elements)


def measured_at(sizes: list[float], seconds: list[float], size: float) -> float:
    """A latency measured at ascending `sizes`, at `size`: log-log between two measured points, the smallest one's below
    them, proportional beyond the largest (bandwidth- or compute-bound there)."""
    if size <= sizes[0]:
        return seconds[0]
    if size >= sizes[-1]:
        return seconds[-1] * size / sizes[-1]
    i = bisect.bisect_left(sizes, size)
    t = (math.log(size) - math.log(sizes[i - 1])) / (math.log(sizes[i]) - math.log(sizes[i - 1]))
    return math.exp(math.log(seconds[i - 1]) + t * (math.log(seconds[i]) - math.log(seconds[i - 1])))

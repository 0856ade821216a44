"""GPU rates: the compute and bandwidth a GPU reaches, and the model's only fitted numbers.

The efficiency constants (fraction of datasheet bandwidth and compute reached, per-layer step
overhead) are GLOBAL per backend: fitted against TensorRT-LLM's published throughput tables by
scripts/plan_vs_published.py, never per GPU, model or row. The interconnect figures are assumptions
written down below, not fitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import GpuSpec, gpu_table
from pipeline.core.quant import QuantFormat


@dataclass(frozen=True)
class Efficiency:
    """The model's only fitted numbers: global, the same for every GPU, precision, model and row."""

    bandwidth: float  # fraction of datasheet HBM bandwidth reached by weight and KV reads
    compute_16bit: float  # fraction of the dense BF16/FP16 rate reached (GEMMs, attention, lm_head)
    compute_8bit: float  # fraction of the dense FP8/INT8 (and FP4) rate reached by quantized GEMMs
    step_overhead_per_layer_s: float  # launch/scheduling cost per layer per iteration
    per_sequence_layer_s: float = 0.0  # cost per decoding sequence per layer per iteration

    def as_dict(self) -> dict[str, float]:
        return {
            "bandwidth_efficiency": self.bandwidth,
            "compute_efficiency_16bit": self.compute_16bit,
            "compute_efficiency_8bit": self.compute_8bit,
            "step_overhead_per_layer_us": round(self.step_overhead_per_layer_s * 1e6, 3),
            "per_sequence_layer_ns": round(self.per_sequence_layer_s * 1e9, 3),
        }


# Fitted by scripts/plan_vs_published.py --fit on every published row of each backend (pipeline/data/
# trtllm_published_throughput.tsv), starting from PRIOR. These are in-sample constants: the accuracy to quote is
# the cross-validated one (`make plan-check`: each fold refitted from PRIOR on its training rows only).
# TensorRT engines: the per-layer overhead sits at the fit's 25 us ceiling (scripts/plan_vs_published.py
# ENGINE_OVERHEAD_CAP_US: launches overlap the GPU work, and a batch-1 decode must stay a weight read within 1.3x,
# tests/unit/planner/test_timing.py; the max-load rows alone trade it for bandwidth, up to ~170 us and a doubled TPOT).
EFFICIENCY = Efficiency(bandwidth=0.706, compute_16bit=0.64, compute_8bit=0.608, step_overhead_per_layer_s=25.0e-6,
                        per_sequence_layer_s=176.8e-9)
# PyTorch: the fit (from PRIOR and from the best point of a fixed grid, scripts/plan_vs_published.py fit()) runs to the
# bandwidth bound and puts the rest in the per-step overhead (the LLM API's Python-side scheduling shows as a large fixed
# cost per iteration: the max-load rows cannot tell it from a cost per token); 16-bit compute stays at PRIOR (no 16-bit rows).
PYTORCH_EFFICIENCY = Efficiency(bandwidth=1.0, compute_16bit=0.7, compute_8bit=0.554, step_overhead_per_layer_s=163.9e-6,
                                per_sequence_layer_s=153.4e-9)
# The fit's start, written down before any published row was looked at: 80% of datasheet bandwidth, 70% of dense
# tensor-core peak, 10 us per layer per iteration; the per-sequence cost (added later, set once before any fold was
# scored with it: a fraction of a microsecond per sequence per layer for decode attention setup and sampling) 100 ns.
# A constant no training row informs stays here.
PRIOR = Efficiency(bandwidth=0.8, compute_16bit=0.7, compute_8bit=0.7, step_overhead_per_layer_s=10e-6, per_sequence_layer_s=100e-9)


def efficiency_for(backend: str) -> Efficiency:
    """The constants of a backend: "tensorrt" (engines) or "pytorch" (the LLM API's PyTorch backend)."""
    return PYTORCH_EFFICIENCY if backend == "pytorch" else EFFICIENCY

# Per-GPU all-reduce bandwidth (bytes/s, one direction) and latency by interconnect generation.
NVLINK_BANDWIDTH = {"ampere": 300e9, "hopper": 450e9, "blackwell": 900e9}
PCIE_BANDWIDTH = 25e9  # PCIe Gen4 x16, effective
ALLREDUCE_LATENCY_S = {"nvlink": 8e-6, "pcie": 25e-6}
ALLREDUCE_EFFICIENCY = 0.7


def compute_rate(gpu: GpuSpec, quant: QuantFormat) -> float:
    """Dense tensor-core FLOP/s at which this precision's GEMMs run on this GPU."""
    bf16 = (gpu.dense_bf16_tflops or 0) * 1e12
    if quant.name == "nvfp4":
        rate = 2 * (gpu.dense_fp8_tflops or 0) * 1e12  # FP4 tensor cores: twice the FP8 rate
    elif quant.activation_bits == 8 and quant.quant_algo and "SQ" in quant.quant_algo:
        rate = (gpu.dense_int8_tops or 0) * 1e12
    elif quant.activation_bits == 8:
        rate = (gpu.dense_fp8_tflops or 0) * 1e12
    else:  # 16-bit activations (fp16/bf16 and weight-only formats: weights are dequantized on the fly)
        rate = bf16
    return rate or bf16


def attention_rate(gpu: GpuSpec) -> float:
    """Attention math (softmax(QK^T)V) runs in 16-bit."""
    return (gpu.dense_bf16_tflops or 0) * 1e12


def hbm_bandwidth(gpu: GpuSpec) -> float:
    return (gpu.hbm_bandwidth_tbps or 0) * 1e12


def link_bandwidth(gpu: GpuSpec) -> tuple[float, float]:
    """(bytes/s, latency s) of one all-reduce hop: NVLink by generation, else PCIe."""
    if gpu.nvlink:
        return NVLINK_BANDWIDTH.get(gpu.architecture, 300e9), ALLREDUCE_LATENCY_S["nvlink"]
    return PCIE_BANDWIDTH, ALLREDUCE_LATENCY_S["pcie"]


def require_figures(gpu: GpuSpec) -> None:
    if not gpu.memory_gib or not gpu.hbm_bandwidth_tbps or not gpu.dense_bf16_tflops:
        usable = [k for k, g in gpu_table().items() if g.memory_gib and g.hbm_bandwidth_tbps and g.dense_bf16_tflops]
        raise UnsupportedError(
            f"The planner has no memory/bandwidth/FLOP figures for {gpu.key!r}.",
            hint=f"Plan for one of: {', '.join(usable)}.",
        )


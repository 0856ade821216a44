"""GPU rates: the compute and bandwidth a GPU reaches, and the model's only fitted numbers.

The efficiency constants (fraction of datasheet bandwidth and compute reached, or for engines the share of the GEMM
rate measured on silicon, data/trtllm_gemm_rate.tsv; per-layer step overhead) are GLOBAL per backend: fitted against TensorRT-LLM's published throughput tables by
scripts/plan_vs_published.py, never per GPU, model or row. The all-reduce latency is measured (NVIDIA's silicon
data, planner/comm.py) where a GPU has it; elsewhere the interconnect figures below are assumptions written down, not
fitted. FP4 GEMMs without a fitted fraction follow FP8's by the ratio measured on silicon
(data/trtllm_gemm_rate.tsv). An engine's decode attention reads the KV cache at the bandwidth measured on silicon for its
GPU and per-rank attention shape (data/trtllm_decode_attention_bandwidth.tsv).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import lru_cache

from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import GpuSpec, gpu_table
from pipeline.core.quant import QuantFormat, quant_format
from pipeline.data import packaged_fact_rows


@dataclass(frozen=True)
class Efficiency:
    """The model's only fitted numbers: global, the same for every GPU, precision, model and row."""

    bandwidth: float  # fraction of datasheet HBM bandwidth reached by weight reads (and KV reads unless measured)
    compute_16bit: float  # fraction of the dense BF16/FP16 rate reached (GEMMs, attention, lm_head)
    compute_8bit: float  # fraction of the dense FP8/INT8 rate reached by quantized GEMMs
    step_overhead_per_layer_s: float  # launch/scheduling cost per layer per iteration
    per_sequence_layer_s: float = 0.0  # cost per decoding sequence per layer per iteration
    compute_4bit: float | None = None  # fraction of the dense FP4 rate reached by FP4 GEMMs (None: from compute_8bit, see compute_for)
    gemm_roofline_exponent: float | None = None  # GEMM time = p-norm of weight-read and math time (None: their maximum)
    kv_bandwidth_measured: bool = False  # KV reads at the fraction measured on silicon (kv_read_fraction) where there is one
    gemm_rate_measured: bool = False  # the compute fractions are shares of the GEMM rate measured on silicon (measured_gemm_rate), not of the datasheet peak
    moe_expert_compute: float = 1.0  # share of the dense GEMM rate an MoE's routed experts' math reaches (grouped GEMMs, routing)
    moe_measured: bool = False  # routed experts take the MoE layer time measured on silicon (measured_moe_s) where there is one
    sliding_windows: bool = False  # sliding-window layers attend to (and read the KV cache of) their last W tokens only

    def compute_for(self, activation_bits: int) -> float:
        """The compute fraction of GEMMs whose activations have this many bits. FP4 without a fraction of its own: the
        8-bit one times the FP4/FP8 ratio measured on silicon (fp4_share_of_fp8), or, where the fractions are shares of the
        silicon rates (which hold that ratio already), the 8-bit one."""
        if activation_bits >= 16:
            return self.compute_16bit
        if activation_bits <= 4:
            if self.compute_4bit is not None:
                return self.compute_4bit
            return self.compute_8bit if self.gemm_rate_measured else self.compute_8bit * fp4_share_of_fp8()
        return self.compute_8bit

    @property
    def structure(self) -> tuple[bool, ...]:
        """What decides which figures an iteration is timed from (planner.step.StepWork), not how fast they run."""
        return self.kv_bandwidth_measured, self.gemm_rate_measured, self.moe_measured, self.sliding_windows

    def as_dict(self) -> dict[str, float | str | None]:
        return {
            "bandwidth_efficiency": self.bandwidth,
            "compute_efficiency_16bit": self.compute_16bit,
            "compute_efficiency_8bit": self.compute_8bit,
            "step_overhead_per_layer_us": round(self.step_overhead_per_layer_s * 1e6, 3),
            "per_sequence_layer_ns": round(self.per_sequence_layer_s * 1e9, 3),
            "compute_efficiency_4bit": round(self.compute_for(4), 3),
            "kv_bandwidth_efficiency": "measured" if self.kv_bandwidth_measured else self.bandwidth,
            "gemm_roofline_exponent": self.gemm_roofline_exponent,
            "moe_expert_compute": self.moe_expert_compute,
            "moe_layer_time": "measured" if self.moe_measured else "fitted share",
            "sliding_windows": "per layer" if self.sliding_windows else "whole context",
        }


# Fitted by scripts/plan_vs_published.py --fit on every published row of each backend (pipeline/data/
# trtllm_published_throughput.tsv), starting from prior_for(backend). These are in-sample constants: the accuracy to quote
# is the cross-validated one (`make plan-check`: each fold refitted from that start on its training rows only).
# TensorRT engines: with TP's all-reduces taken from silicon (measured_allreduce_s) the per-layer overhead fell from the
# fit's 25 us ceiling (scripts/plan_vs_published.py ENGINE_OVERHEAD_CAP_US: launches overlap the GPU work, and a batch-1
# decode must stay a weight read within 1.3x, tests/unit/planner/test_timing.py) to 7.5 us: the fit had used it to stand
# in for TP 4-8's all-reduce time, which the 8 us-per-call estimate put at a third to a half of the measured one (7.9 us
# once KV reads had their own fitted bandwidth fraction, 0.81 against the weight reads' 0.68, and GEMMs the roofline's
# knee). KV reads now take the fraction measured on silicon per GPU and per-rank attention shape (kv_read_fraction: 0.45-0.86
# on H100 with an FP8 cache, lowest where a rank holds one KV head) instead of one fitted for all; the weight reads' fraction
# rose to 0.72 and the per-layer cost to 24.8 us, at the cap again (the cap keeps a batch-1 decode a weight read within 1.3x).
# Then the compute fractions became shares of the GEMM rate measured on silicon per GPU and GEMM dtype (measured_gemm_rate:
# L40S's FP8 GEMMs reach 0.48 of its datasheet peak, H100's 0.61, so one fraction of the datasheet had L40S's compute-bound
# rows 15-20% fast): 16-bit 0.80 and 8-bit 0.98 of silicon's rates.
# An MoE's routed experts (grouped GEMMs over the experts, with routing and token permutation) reach a share of that rate
# of their own, fitted alone on the Mixtral rows of data/trtllm_published_throughput_more_models.tsv with the dense constants
# as they are (scripts/plan_vs_more_models.py): 0.68 (0.63 with 8x7B held out, 0.69 with 8x22B; 0.67-0.69 with a GPU out).
# As if dense (1.0), Mixtral came out 15% fast in the median and 49% at worst.
# Since each published run is replayed iteration by iteration as the scheduler serves its dataset (planner/offline.py)
# instead of as waves of a steady state, the all-row fit no longer reaches the per-layer cost's 25 us bound: 8.3 us, with
# the weight reads' fraction 0.69; the MoE share 0.69 (0.64 with 8x7B held out, 0.71 with 8x22B).
EFFICIENCY = Efficiency(bandwidth=0.685, compute_16bit=0.796, compute_8bit=0.967, step_overhead_per_layer_s=8.3e-6,
                        per_sequence_layer_s=135.2e-9, gemm_roofline_exponent=2.0, kv_bandwidth_measured=True,
                        gemm_rate_measured=True, moe_expert_compute=0.69)
# PyTorch: fitted (from PRIOR and from the best point of a fixed grid, scripts/plan_vs_published.py fit()) on the published
# max-load rows and, at a tenth of their weight, on the TPOT of serving measured on silicon (the last paragraph); until
# those were added the fit ran to the bandwidth bound and put the rest in a per-layer cost of 127 us per iteration (the
# max-load rows cannot tell one from the other); 16-bit compute stays at PRIOR (no 16-bit rows).
# FP4 GEMMs (B200's NVFP4 rows) reach a lower fraction of their twice-FP8 peak than FP8 GEMMs do of theirs: fitted apart,
# 0.39 against 0.55 (sharing one constant, the FP4 rows pulled the FP8 one down and H100/H200 came out 5-17% slow); the
# silicon FP4/FP8 ratio (0.77, fp4_share_of_fp8) is where the fit starts FP4 from, and what a fold without FP4 rows uses.
# With the runs' waves counted the cost per decoding sequence fell from 125 to 21 ns: it had stood in for the last waves.
# Its routed experts take the MoE layer time NVIDIA measured on silicon for the shape (measured_moe_s: the PyTorch flow's
# CUTLASS MoE, which this backend runs), nothing fitted: the 1.0 page's MoE rows at TP 1 (Qwen3-30B-A3B and Llama 4 Scout
# on B200, never fitted) came out 12.6% and 12.5% in the median (47% and 24% worst; Qwen3 with 1.2-dev's rows too 14.1%);
# since each run is replayed as the scheduler serves it, Qwen3 (both pages) 5.4% and Scout 10.8% (34% and 22% worst).
# At the dense rate (moe_expert_compute 1.0, still the fallback for a shape no GPU was timed on: planner/moe_timing.py)
# they were +77% and +57% (Qwen3 with 1.2-dev's rows +74%), and no one fitted share served both (fitted on one, the other
# stayed 12-38% off); `pipeline plan` says which applies (caveats.accuracy_caveats).
# Sliding-window layers (Gemma 2/3, GPT-OSS, Mistral v0.1: ModelSpec.sliding_windows) attend to their last W tokens, and
# Llama 4's chunked layers (ModelSpec.attention_chunks, passed to the attention by Llama4DecoderLayer) to their own chunk: the
# PyTorch backend's models pass each layer's window to the attention op (Gemma3Attention and MixtralAttention forward
# attention_window_size; TrtllmAttention plans it per layer, `attention_window_size or max_sequence_length`), so decode
# reads and prefill math shrink there. Its KV cache still holds every layer's whole sequence (no max_attention_window in
# the options the pipeline writes), so capacity does not change. Engines run every layer over the whole context: the C++
# runtime windows a layer only when max_attention_window_size is set, which neither trtllm-bench nor the pipeline does.
# No published row has a windowed model on the PyTorch backend, so this is structure read from NVIDIA's model classes,
# not checked against a figure.
# With trtllm-bench's limits for NVFP4 checkpoints sized from the elements their safetensors hold (published.bench_param_count:
# 0.56 of the weights, not all of them) the fit moved little: bandwidth 1.0 -> 0.988, per-layer cost 141.9 -> 139.4 us.
# Replaying each run as the scheduler serves it (planner/offline.py: whole prompts admitted while the token budget lasts,
# the batch filling and draining) moved it to bandwidth 1.0, per-layer cost 127.1 us and per sequence 60.1 ns. Giving the
# 1.2-dev page's 1000/1000 rows their run's 3000 requests (data/trtllm_bench_requests.tsv; they had been planned as steady
# state) moved it to 126.9 us and 62.7 ns, FP8 0.554 -> 0.556 and FP4 0.396 -> 0.398.
# Serving NVIDIA measured on silicon at 4-128 concurrent requests (planner/serving_sample.py) took less time per token
# than that per-layer cost allows at few requests (TPOT +37% at 8 requests on TensorRT-LLM 1.0.0rc3, +70% at 4 on a later
# release): the max-load rows cannot tell the weight reads' fraction from a cost per iteration (with KV reads at
# silicon's figures the folds' constants ran from 0.72 of the bandwidth and no per-layer cost to 0.99 and 59 us), and the
# serving rows can. So the fit now adds those rows' TPOT at a tenth of the throughput rows' total weight
# (scripts/plan_vs_published.py SERVING_SHARE; 1.0, 0.3 and 0.03 tried too), and this backend takes the engines'
# structure where it runs the same kernels: KV reads at silicon's figure for the attention shape, a GEMM's time the
# 2-norm of its reads and math. Throughput held out by GPU 3.8% / 15.2% -> 3.7% / 14.5% (B200 5.3% -> 3.8%), by model
# 3.9% / 15.8% -> 4.3% / 12.3%; TPOT of the serving rows of the GPU or model a fold held out 22.9% -> 13.8% and 22.5% ->
# 12.4% in the median; of a model no fit reads (Llama 3.1 8B BF16 on H100) 14.0% -> 8.9% (README, planner section).
PYTORCH_EFFICIENCY = Efficiency(bandwidth=0.877, compute_16bit=0.7, compute_8bit=0.562, step_overhead_per_layer_s=46.9e-6,
                                per_sequence_layer_s=56.5e-9, compute_4bit=0.4, kv_bandwidth_measured=True,
                                gemm_roofline_exponent=2.0, moe_measured=True, sliding_windows=True)
# The fit's start, written down before any published row was looked at: 80% of datasheet bandwidth, 70% of dense
# tensor-core peak, 10 us per layer per iteration; the per-sequence cost (added later, set once before any fold was
# scored with it: a fraction of a microsecond per sequence per layer for decode attention setup and sampling) 100 ns;
# FP4 GEMMs at the 8-bit fraction times the FP4/FP8 ratio measured on silicon (compute_4bit None; fp4_share_of_fp8) until
# FP4 rows say otherwise (that rule replaced "FP4 as FP8" after the B200-held-out fold was seen at 18% / 29%). A constant no
# training row informs stays here. For engines (prior_for) the compute fractions are shares of silicon's GEMM rates, so
# their 70% is of those.
PRIOR = Efficiency(bandwidth=0.8, compute_16bit=0.7, compute_8bit=0.7, step_overhead_per_layer_s=10e-6, per_sequence_layer_s=100e-9)


def prior_for(backend: str) -> Efficiency:
    """The fit's start for a backend, which also fixes its model's structure. Engines: GEMM time is the 2-norm of weight
    reads and math (a GEMM near the ridge reaches neither bound), the compute fractions are shares of silicon's GEMM
    rates (measured_gemm_rate), and KV reads run at silicon's figure for the rank's attention shape (kv_read_fraction).
    PyTorch backend: fractions of the datasheet as PRIOR (shares of silicon's GEMM rates made its held-out figures worse,
    README, planner section), KV reads and GEMM time as for engines, an MoE's routed experts at silicon's MoE timings,
    sliding-window layers over their window."""
    if backend == "pytorch":
        # structure, not fitted: its folds report what ships
        return replace(PRIOR, kv_bandwidth_measured=True, gemm_roofline_exponent=2.0, moe_measured=True, sliding_windows=True)
    return replace(PRIOR, kv_bandwidth_measured=True, gemm_rate_measured=True, gemm_roofline_exponent=2.0)


def efficiency_for(backend: str) -> Efficiency:
    """The constants of a backend: "tensorrt" (engines) or "pytorch" (the LLM API's PyTorch backend)."""
    return PYTORCH_EFFICIENCY if backend == "pytorch" else EFFICIENCY

# Per-GPU all-reduce bandwidth (bytes/s, one direction) and latency by interconnect generation: the estimate where no
# measured latency applies (measured_allreduce_s: NVLink GPUs of data/trtllm_allreduce_latency.tsv, TP 2, 4, 8).
NVLINK_BANDWIDTH = {"ampere": 300e9, "hopper": 450e9, "blackwell": 900e9}
# PCIe x16 by the generation a card of that architecture has, at ~0.78 of its per-direction rate: Gen4 (A10G, L4, L40S:
# 32 GB/s a direction), Gen5 (RTX PRO 6000 Blackwell Server: 64 GB/s; AIConfigurator 0.12.0 systems/
# rtx_pro_6000_server.yaml pcie_bw 64e9 "PCIe Gen5 x16", l40s.yaml pcie_bw 32e9 "pcie 4.0").
PCIE_BANDWIDTH = {"ampere": 25e9, "ada": 25e9, "blackwell": 50e9}
# TP beyond the GPU's NVLink domain (GpuSpec.nvlink_domain: one HGX board's 8, a GB200 NVL72 rack's 72) crosses nodes: the
# all-reduce then runs at the node's fabric, one InfiniBand NIC per GPU as NVIDIA's DGX systems ship them (DGX A100: 8x
# 200 Gb/s HDR; DGX H100, H200 and B200: 8x 400 Gb/s NDR). Not GpuSpec.gpus_per_node (the GPUs a Kubernetes node holds): a
# GB200 tray holds 4, but its all-reduce stays on NVLink up to 72. A PCIe card's node: GPUS_PER_NODE.
GPUS_PER_NODE = 8
INTERNODE_BANDWIDTH = {"ampere": 25e9, "hopper": 50e9, "blackwell": 50e9}
ALLREDUCE_LATENCY_S = {"nvlink": 8e-6, "pcie": 25e-6, "internode": 30e-6}
ALLREDUCE_EFFICIENCY = 0.7


@lru_cache(maxsize=1)
def _silicon_gemm_rates() -> dict[tuple[str, str], float]:
    """(gpu key, GEMM dtype) -> FLOP/s at the largest M measured on silicon (data/trtllm_gemm_rate.tsv, NVIDIA's perf
    database in AIConfigurator: the median over dense-layer shapes)."""
    largest: dict[tuple[str, str], tuple[int, float]] = {}
    for row in packaged_fact_rows("trtllm_gemm_rate.tsv"):
        key, tokens = (row["gpu"], row["dtype"]), int(row["tokens"])
        if tokens >= largest.get(key, (0, 0.0))[0]:
            largest[key] = (tokens, float(row["median_tflops"]) * 1e12)
    return {key: rate for key, (_, rate) in largest.items()}


@lru_cache(maxsize=1)
def fp4_share_of_fp8() -> float:
    """How much less of its peak an FP4 GEMM reaches than an FP8 one: (FP4 rate / FP4 peak) / (FP8 rate / FP8 peak) at
    the largest M measured on silicon, the median over the GPUs measured for both (B200: 0.77)."""
    silicon = _silicon_gemm_rates()
    ratios = []
    for (key, dtype), fp4 in silicon.items():
        fp8 = silicon.get((key, "fp8"))
        gpu = gpu_table().get(key)
        if dtype == "nvfp4" and fp8 and gpu and gpu.dense_fp8_tflops:
            fp4_peak, fp8_peak = (compute_rate(gpu, quant_format(name)) for name in ("nvfp4", "fp8"))
            ratios.append((fp4 / fp4_peak) / (fp8 / fp8_peak))
    return statistics.median(ratios) if ratios else 1.0


def gemm_dtype(quant: QuantFormat) -> str:
    """The GEMM kind a precision runs (data/trtllm_gemm_rate.tsv's dtype): 16-bit activations for fp16/bf16 and the
    weight-only formats (their weights are dequantized on the fly)."""
    if quant.name == "nvfp4":
        return "nvfp4"
    if quant.activation_bits == 8:
        return "sq" if quant.quant_algo and "SQ" in quant.quant_algo else "fp8"
    return "bfloat16"


@lru_cache(maxsize=256)
def measured_gemm_rate(gpu: GpuSpec, quant: QuantFormat) -> float:
    """FLOP/s that TensorRT-LLM's GEMMs of this precision reach on this GPU at large M, measured on silicon; a GPU without
    a figure: its datasheet rate times the median share of the datasheet that the GPUs measured reach (L40S's FP8 GEMMs
    reach 0.48 of theirs, H100's 0.61); the CPU: its own measured rate (planner/cpu.py)."""
    datasheet = compute_rate(gpu, quant)
    if gpu.is_cpu:
        return datasheet
    dtype = gemm_dtype(quant)
    silicon = _silicon_gemm_rates()
    if (gpu.key, dtype) in silicon:
        return silicon[(gpu.key, dtype)]
    shares = [rate / compute_rate(gpu_table()[key], quant) for (key, measured), rate in silicon.items()
              if measured == dtype and key in gpu_table()]
    return datasheet * (statistics.median(shares) if shares else 1.0)


AttentionShape = tuple[int, float, float]  # (head_dim, query heads, KV heads) of one rank


@lru_cache(maxsize=1)
def _decode_attention_table() -> dict[tuple[str, str], dict[AttentionShape, float]]:
    """(gpu key, "fp8" or "bfloat16") -> {per-rank shape: fraction of datasheet HBM bandwidth}, from
    data/trtllm_decode_attention_bandwidth.tsv. Tables AIConfigurator marks "legacy" are left out: A100's (TensorRT-LLM
    1.0) reads 32 query and 8 KV heads at 1.45x its 2.04 TB/s, so it does not measure HBM reads. A single figure above the
    datasheet bandwidth (a few of L40S's small shapes, whose KV cache fits its 96 MB L2) counts as that bandwidth: the
    planner plans for reads from HBM."""
    table: dict[tuple[str, str], dict[AttentionShape, float]] = {}
    for row in packaged_fact_rows("trtllm_decode_attention_bandwidth.tsv"):
        gpu = gpu_table().get(row["gpu"])
        if gpu and gpu.hbm_bandwidth_tbps and row["provenance"] != "legacy":
            shape = (int(row["head_dim"]), float(row["heads"]), float(row["kv_heads"]))
            fraction = float(row["median_gbps"]) / (gpu.hbm_bandwidth_tbps * 1e3)
            table.setdefault((row["gpu"], row["kv_dtype"]), {})[shape] = min(fraction, 1.0)
    return table


def _nearest(shapes: dict[AttentionShape, float], shape: AttentionShape) -> float:
    """The figure of the measured shape nearest this one: the same head_dim where measured, then heads and KV heads by ratio."""
    head_dim, heads, kv_heads = shape

    def distance(other: AttentionShape) -> tuple[float, float]:
        return (abs(math.log(other[0] / head_dim)),
                abs(math.log(other[1] / max(heads, 1e-9))) + abs(math.log(other[2] / max(kv_heads, 1e-9))))

    return shapes[min(shapes, key=distance)]


@lru_cache(maxsize=4096)
def kv_read_fraction(gpu_key: str, kv_bytes_per_element: float, head_dim: int, heads: float, kv_heads: float) -> float | None:
    """The fraction of datasheet HBM bandwidth at which TensorRT-LLM's decode attention reads the KV cache on silicon for
    one rank's attention shape (head_dim, query heads, KV heads) at max-load batches and KV lengths
    (data/trtllm_decode_attention_bandwidth.tsv): this GPU's figure at the nearest measured shape, or, for a GPU without
    one, the median over the GPUs measured. None for the CPU and where nothing is measured."""
    gpu = gpu_table().get(gpu_key)
    if gpu is None or gpu.is_cpu:
        return None
    dtype = "fp8" if kv_bytes_per_element <= 1 else "bfloat16"
    table = _decode_attention_table()
    shape = (head_dim, heads, kv_heads)
    if (gpu_key, dtype) in table:
        return _nearest(table[(gpu_key, dtype)], shape)
    figures = [_nearest(shapes, shape) for (_, measured), shapes in table.items() if measured == dtype]
    return statistics.median(figures) if figures else None


def compute_rate(gpu: GpuSpec, quant: QuantFormat) -> float:
    """Dense tensor-core FLOP/s at which this precision's GEMMs run on this GPU (the datasheet's)."""
    bf16 = (gpu.dense_bf16_tflops or 0) * 1e12
    fp8, int8 = (gpu.dense_fp8_tflops or 0) * 1e12, (gpu.dense_int8_tops or 0) * 1e12
    rate = {"nvfp4": 2 * fp8, "sq": int8, "fp8": fp8, "bfloat16": bf16}[gemm_dtype(quant)]  # FP4 tensor cores: twice FP8
    return rate or bf16


def attention_rate(gpu: GpuSpec) -> float:
    """Attention math (softmax(QK^T)V) runs in 16-bit."""
    return (gpu.dense_bf16_tflops or 0) * 1e12


def hbm_bandwidth(gpu: GpuSpec) -> float:
    return (gpu.hbm_bandwidth_tbps or 0) * 1e12


def link_domain(gpu: GpuSpec) -> int:
    """The GPUs one link joins without the NIC: the NVLink domain, or a PCIe card's node."""
    return gpu.nvlink_domain if gpu.nvlink else GPUS_PER_NODE


def link_bandwidth(gpu: GpuSpec, tp: int = 1) -> tuple[float, float]:
    """(bytes/s, latency s) of one all-reduce hop among `tp` GPUs: beyond the link domain the InfiniBand NIC, else
    NVLink by generation, else PCIe."""
    return hop_link(gpu, across_nodes=tp > link_domain(gpu))


def hop_link(gpu: GpuSpec, *, across_nodes: bool) -> tuple[float, float]:
    """(bytes/s, latency s) of one hop: between link domains the InfiniBand NIC, else NVLink by generation, else PCIe."""
    if across_nodes:
        return INTERNODE_BANDWIDTH.get(gpu.architecture, 25e9), ALLREDUCE_LATENCY_S["internode"]
    if gpu.nvlink:
        return NVLINK_BANDWIDTH.get(gpu.architecture, 300e9), ALLREDUCE_LATENCY_S["nvlink"]
    return PCIE_BANDWIDTH.get(gpu.architecture, 25e9), ALLREDUCE_LATENCY_S["pcie"]


def require_figures(gpu: GpuSpec) -> None:
    if not gpu.memory_gib or not gpu.hbm_bandwidth_tbps or not gpu.dense_bf16_tflops:
        usable = [k for k, g in gpu_table().items() if g.memory_gib and g.hbm_bandwidth_tbps and g.dense_bf16_tflops]
        raise UnsupportedError(
            f"The planner has no memory/bandwidth/FLOP figures for {gpu.key!r}.",
            hint=f"Plan for one of: {', '.join(usable)}.",
        )


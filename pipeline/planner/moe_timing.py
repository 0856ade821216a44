"""An MoE layer's routed experts, timed on silicon: TensorRT-LLM's PyTorch-flow CUTLASS MoE as NVIDIA measured it per
GPU, dtype, expert shape, expert TP and expert parallelism (data/trtllm_moe_latency.tsv, from AIConfigurator's perf
database).

Where silicon timed the shape on other GPUs but not on this one (GPT-OSS 120B's 128 experts on H100, Llama 4 Maverick's on
Hopper), the time is carried over: the other GPU's measurement of the shape, times how much slower or faster this GPU ran
the shapes both were measured on at that dtype and expert split (the median of their ratios at each token count). Of the
other GPUs, the one whose ratios agree best across those shapes is used. Held out shape by shape from the table
(scripts/moe_transfer_check.py), that lands within 6% of silicon in the median on H100 and H200 (20% at the 90th
percentile), 2% on B200 and GB200, and 17% on the RTX PRO 6000 (whose only donors, B200 and GB200, time shapes unlike it).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from pipeline.core.gpus import GpuSpec, gpu_table
from pipeline.core.quant import QuantFormat
from pipeline.data import packaged_fact_rows
from pipeline.planner.comm import measured_at
from pipeline.planner.shapes import ModelSpec

# (gpu key, dtype, hidden, expert width, top-k, experts, expert TP, expert parallelism)
MoeKey = tuple[str, str, int, int, int, int, int, int]
Curve = tuple[list[float], list[float]]  # token counts, seconds; ascending

# The planner's precisions -> the dtypes of the MoE table; others have no silicon figure.
_MOE_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4"}
# Token counts at which a donor GPU's ratios are compared across shapes (decode batches to long prefills).
_AGREEMENT_TOKENS = (16, 64, 256, 1024, 4096, 16384)


def mxfp4_moe_dtype(gpu: GpuSpec) -> str:
    """The MoE kind an MXFP4 checkpoint's experts run (data/trtllm_moe_latency.tsv's dtype), as TensorRT-LLM's PyTorch
    backend picks it (tensorrt_llm/_torch/model_config.py @1a0dc5f7 get_mxfp4_quant_algo, CUTLASS MoE): MXFP8
    activations from SM 100 (Blackwell), 16-bit activations below."""
    return "w4a8_mxfp4_mxfp8" if gpu.cc >= 10.0 else "w4a16_mxfp4"


@lru_cache(maxsize=1)
def _moe_table() -> dict[MoeKey, Curve]:
    """Every measured MoE shape: key -> (token counts, seconds), ascending."""
    table = {}
    for row in packaged_fact_rows("trtllm_moe_latency.tsv"):
        key = (row["gpu"], row["dtype"],
               *(int(row[k]) for k in ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp", "moe_ep")))
        table[key] = ([float(t) for t in row["tokens"].split(",")], [float(us) * 1e-6 for us in row["latency_us"].split(",")])
    return table


def moe_key(gpu: GpuSpec, quant: QuantFormat, model: ModelSpec, tp: int, *, expert_parallel: bool = False) -> MoeKey | None:
    """The table's key for this model's experts on this GPU at this precision over `tp` GPUs (expert_parallel: each GPU
    holds whole experts, EP = tp at expert TP 1; else every expert split over the tp GPUs); None for a dense model or a
    precision silicon has no MoE figure for."""
    dtype = mxfp4_moe_dtype(gpu) if model.expert_weights == "mxfp4" else _MOE_DTYPES.get(quant.name)
    if not model.moe_layer_count or not dtype:
        return None
    moe_tp, moe_ep = (1, tp) if expert_parallel else (tp, 1)
    return (gpu.key, dtype, model.hidden_size, model.expert_width, model.experts_per_token, model.num_experts, moe_tp, moe_ep)


@dataclass(frozen=True)
class MoeTiming:
    """One MoE layer's routed experts for a key: measured on this GPU (donor None), or carried over from the donor GPU's
    measurement of the shape by the ratios of `references` shapes measured on both."""

    curve: Curve
    donor: str | None = None
    references: tuple[tuple[Curve, Curve], ...] = ()  # (this GPU's curve, the donor's) per shared shape

    def seconds(self, tokens: float) -> float:
        """Seconds over `tokens` tokens (all ranks' tokens together under expert parallelism)."""
        measured = measured_at(*self.curve, tokens)
        if self.donor is None:
            return measured
        return measured * math.exp(statistics.median(_log_ratio(ref, tokens) for ref in self.references))


def _log_ratio(reference: tuple[Curve, Curve], tokens: float) -> float:
    here, donor = reference
    return math.log(measured_at(*here, tokens) / measured_at(*donor, tokens))


def _disagreement(references: list[tuple[Curve, Curve]]) -> float:
    """How far a donor's ratios to this GPU differ from shape to shape (the median over token counts of their spread in
    log terms); a lone shape cannot show it, so it counts as infinitely far."""
    if len(references) < 2:
        return math.inf
    return statistics.median(statistics.pstdev([_log_ratio(ref, n) for ref in references]) for n in _AGREEMENT_TOKENS)


@lru_cache(maxsize=4096)
def moe_timing_for(key: MoeKey | None) -> MoeTiming | None:
    """The timing of a key: measured where the table has it, else carried over from another GPU (carried_over); None for
    no key, or where no GPU can lend it."""
    if key is None:
        return None
    table = _moe_table()
    return MoeTiming(table[key]) if key in table else carried_over(key, table)


def carried_over(key: MoeKey, table: dict[MoeKey, Curve]) -> MoeTiming | None:
    """The key's shape as another GPU measured it, scaled by this GPU's ratio to that one on the shapes both were
    measured on at the key's dtype and expert split; of the GPUs that could lend it, the one whose ratios agree best
    from shape to shape (then one of the same architecture, then the one sharing most shapes). None where no GPU
    measured the shape or shares one with this."""
    gpu, rest = key[0], key[1:]
    dtype, split = rest[0], rest[5:]
    here = {k[1:]: curve for k, curve in table.items() if k[0] == gpu and k[1] == dtype and k[6:] == split and k != key}
    donors = []
    for donor in sorted({k[0] for k in table} - {gpu}):
        source = table.get((donor, *rest))
        references = [(curve, table[(donor, *shape)]) for shape, curve in here.items() if (donor, *shape) in table]
        if source and references:
            donors.append((_disagreement(references), _architecture(donor) != _architecture(gpu), -len(references),
                           donor, source, references))
    if not donors:
        return None
    *_, donor, source, references = min(donors, key=lambda d: d[:4])
    return MoeTiming(source, donor, tuple(references))


def _architecture(gpu: str) -> str | None:
    spec = gpu_table().get(gpu)
    return spec.architecture if spec else None


def held_out_errors(min_tokens: float = 64, max_tokens: float = 16384) -> dict[str, list[float]]:
    """How well carrying over works, shape by shape: each measured key held out of the table and carried over from the
    rest; per GPU, each key's median |error| % against its own measurement over its measured token counts between
    min_tokens and max_tokens (decode batches to long prefills). Keys no other GPU could lend are left out."""
    table = _moe_table()
    errors: dict[str, list[float]] = {}
    for key, (tokens, seconds) in table.items():
        timing = carried_over(key, table)  # which never reads the key itself: it is neither a reference nor a donor's
        if timing is None:
            continue
        errors.setdefault(key[0], []).append(statistics.median(
            abs(100 * (timing.seconds(n) / s - 1)) for n, s in zip(tokens, seconds) if min_tokens <= n <= max_tokens))
    return errors


def measured_moe_s(gpu: GpuSpec, quant: QuantFormat, model: ModelSpec, tp: int, tokens: float, *,
                   expert_parallel: bool = False) -> float | None:
    """Seconds of one MoE layer's routed experts (routing, permutation, grouped GEMMs, finalize) over `tokens` tokens, as
    measured on silicon for this GPU, dtype, expert shape and split, or carried over from another GPU's measurement
    (moe_timing_for); None where neither is possible. expert_parallel: the experts spread whole over the `tp` GPUs
    (EP = tp, expert TP 1), `tokens` being all the GPUs' tokens together."""
    timing = moe_timing_for(moe_key(gpu, quant, model, tp, expert_parallel=expert_parallel))
    if timing is None or tokens <= 0:
        return None
    return timing.seconds(tokens)

"""The time model: one in-flight-batching iteration is a handful of phases run one after the other.

The GEMMs read every weight once and do 2 FLOPs per parameter per token, so they take the longer of
the two (bandwidth-bound at small batch, compute-bound at large batch), or, where a backend's constants say so, the
2-norm of the two (near the ridge neither bound is reached); decode attention reads each
sequence's KV cache (bandwidth-bound); context attention is compute-bound (causal, ~ISL^2); tensor
parallelism adds two all-reduces per layer; every iteration pays a fixed launch cost per layer.
TTFT, TPOT and throughput all come from this one step-time model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.core.quant import quant_format
from pipeline.planner.memory import (
    ACTIVATION_BYTES, MemoryPlan, fitting_memory, kv_bytes_per_token, kv_heads_per_gpu, weight_bytes_read_per_step,
)
from pipeline.planner.offline import RunLimits, max_utilization_schedule, offline_schedule
from pipeline.planner.comm import measured_allreduce_s, measured_collective_s
from pipeline.planner.rates import (ALLREDUCE_EFFICIENCY, EFFICIENCY, Efficiency, attention_rate, compute_rate, hbm_bandwidth,
                                    kv_read_fraction, link_bandwidth, measured_gemm_rate)
from pipeline.planner.moe_timing import measured_moe_s
from pipeline.planner.recommend import recommend
from pipeline.planner.scenario import Scenario

BF16 = quant_format("bf16")


@dataclass(frozen=True)
class StepTime:
    """One in-flight-batching iteration: `decode` sequences each emit a token while `prefill_tokens`
    prompt tokens are processed; seconds per phase."""

    decode: float
    prefill_tokens: float
    gemm_s: float
    decode_attention_s: float
    context_attention_s: float
    allreduce_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.decode_attention_s + self.context_attention_s + self.allreduce_s + self.overhead_s


@dataclass(frozen=True)
class StepLoad:
    """What one iteration carries. decode: sequences in generation; decode_context: their mean KV
    length; prefill_tokens: prompt tokens in this iteration; prefill_context: the mean causal span they
    attend over (ISL/2 for a whole prompt); logits_tokens: tokens that need the lm_head (default: decode); peer_tokens:
    under attention data parallelism, the tokens the other GPUs bring to the experts (default: as many as this one each,
    the balanced load of a busy server)."""

    decode: float
    decode_context: float
    prefill_tokens: float
    prefill_context: float
    logits_tokens: float | None = None
    peer_tokens: float | None = None


def gemm_roofline_s(read_s: float, compute_s: float, exponent: float | None) -> float:
    """Seconds of the GEMMs given their weight-read and compute times alone: the larger (exponent None), or their p-norm
    (a GEMM whose reads and math take about as long reaches neither bound)."""
    if exponent is None:
        return max(read_s, compute_s)
    return (read_s**exponent + compute_s**exponent) ** (1 / exponent)


def kv_fraction(scenario: Scenario, eff: Efficiency) -> float:
    """The fraction of datasheet bandwidth at which decode attention reads the KV cache: as measured on silicon for one
    rank's attention shape where the backend's constants say so and the GPU has a figure, else the weight reads' fraction."""
    if eff.kv_bandwidth_measured:
        model, tp = scenario.model, scenario.attention_tp
        measured = kv_read_fraction(scenario.gpu.key, scenario.kv.bytes_per_element, model.head_dim, model.num_heads / tp,
                                    kv_heads_per_gpu(model, tp))
        if measured is not None:
            return measured
    return eff.bandwidth


def step_time(scenario: Scenario, load: StepLoad, eff: Efficiency = EFFICIENCY) -> StepTime:
    """Seconds for one iteration of `load` (the scenario's isl/osl are not used: the load says it all). With attention
    data parallelism the load is one GPU's, every GPU carrying as much."""
    model, gpu, quant, kv, tp = scenario.model, scenario.gpu, scenario.quant, scenario.kv, scenario.tp
    adp, attention_tp = scenario.attention_dp, scenario.attention_tp
    decode, prefill_tokens = load.decode, load.prefill_tokens
    tokens = decode + prefill_tokens
    # the experts see every rank's tokens
    expert_tokens = tokens * scenario.ranks if load.peer_tokens is None else tokens + load.peer_tokens
    logits = decode if load.logits_tokens is None else load.logits_tokens
    bandwidth = hbm_bandwidth(gpu) * eff.bandwidth
    if eff.gemm_rate_measured:  # shares of the rate measured on silicon, 16-bit math at the BF16 GEMMs' rate
        rate = measured_gemm_rate(gpu, quant) * eff.compute_for(quant.activation_bits)
        attn_rate = measured_gemm_rate(gpu, BF16) * eff.compute_16bit
    else:
        rate = compute_rate(gpu, quant) * eff.compute_for(quant.activation_bits)
        attn_rate = attention_rate(gpu) * eff.compute_16bit  # attention and the (unquantized) lm_head run in 16-bit
    # GEMMs: weights read once per step; 2 FLOPs per active weight per token. An MoE's routed experts take the MoE layer
    # time measured on silicon where the backend's constants say so and the table has the shape, else their own share.
    moe_layer_s = (measured_moe_s(gpu, quant, model, tp, expert_tokens, expert_parallel=adp)
                   if eff.moe_measured and tokens else None)
    experts = model.routed_active_params_per_token
    expert_params = 0.0 if moe_layer_s is not None else experts / eff.moe_expert_compute
    layer_flops = 2 * ((model.active_params_per_token - experts) * tokens / attention_tp + expert_params * expert_tokens / tp)
    gemm_compute_s = layer_flops / rate + model.head_flops_per_token * logits / attention_tp / attn_rate
    # an MoE's untouched experts are not read (nor, where they are timed apart, any of them)
    read_bytes = weight_bytes_read_per_step(model, quant, tp, expert_tokens, routed_experts=moe_layer_s is None,
                                            attention_dp=adp)
    gemm_s = gemm_roofline_s(read_bytes / bandwidth, gemm_compute_s, eff.gemm_roofline_exponent) if tokens else 0.0
    gemm_s += (moe_layer_s or 0.0) * model.moe_layer_count
    # Decode attention: every sequence reads its whole KV cache (a sliding-window layer its last W tokens, a chunked layer
    # its own chunk, where the backend runs them so).
    local = eff.sliding_windows
    kv_read = decode * (model.attended_tokens(load.decode_context) if local else load.decode_context) * kv_bytes_per_token(model, kv, attention_tp)
    decode_attention_s = kv_read / (hbm_bandwidth(gpu) * kv_fraction(scenario, eff)) if kv_read else 0.0
    # Context attention: QK^T and PV, 2 FLOPs each per (query, key, head, dim), causal span.
    heads = model.num_heads / attention_tp
    span = model.attended_tokens(load.prefill_context, prefill=True) if local else load.prefill_context
    context_flops = 4 * model.num_layers * heads * model.head_dim * prefill_tokens * span
    context_attention_s = context_flops / attn_rate if attn_rate else 0.0
    # TP: two all-reduces of the hidden states per layer, as measured on this GPU where the table has it, else
    # estimated (ring: 2(tp-1)/tp of the bytes per GPU). Attention data parallelism instead gathers every rank's tokens
    # before each MoE layer and scatters the sums back after it (_expert_exchange_s); where NCCL's figures are missing,
    # as the one all-reduce of all the tokens the two together move.
    allreduce_s = 0.0
    if tp > 1 and tokens:
        elements = expert_tokens * model.hidden_size
        per_call = _expert_exchange_s(scenario, expert_tokens) if adp else None
        per_call = per_call or measured_allreduce_s(gpu, tp, elements)
        if per_call is None:
            link, latency = link_bandwidth(gpu, tp)
            per_call = latency + 2 * (tp - 1) / tp * elements * ACTIVATION_BYTES / (link * ALLREDUCE_EFFICIENCY)
        allreduce_s = (model.moe_layer_count if adp else 2 * model.num_layers) * per_call
    overhead_s = (eff.step_overhead_per_layer_s + eff.per_sequence_layer_s * decode) * model.num_layers
    return StepTime(decode, prefill_tokens, gemm_s, decode_attention_s, context_attention_s, allreduce_s, overhead_s)


# What TensorRT-LLM's CutlassFusedMoE gathers under attention data parallelism (fused_moe_cutlass.py @000a01de
# forward_chunk, run_post_quant_allgather), in one NCCL all-gather: each token's activations, already quantized where the
# experts take them so (FP8 per tensor: one byte each; NVFP4: half a byte plus an FP8 scale per 16; else 16-bit), and its
# top-k expert ids (int32) and weights (float32); after the experts, an NCCL reduce-scatter of the 16-bit outputs
# (thop/reducescatterOp.cpp @0bd88711).
_GATHERED_BYTES = {"fp8": 1.0, "nvfp4": 0.5 + 1 / 16}


def _expert_exchange_s(scenario: Scenario, tokens: float) -> float | None:
    """Seconds of one MoE layer's gather and scatter of all GPUs' `tokens` tokens, as NCCL's collectives were measured
    on this GPU (None where they were not). MXFP4 experts (GPT-OSS) gather 16-bit activations."""
    model, gpu, tp = scenario.model, scenario.gpu, scenario.tp
    activation = ACTIVATION_BYTES if model.expert_weights == "mxfp4" else _GATHERED_BYTES.get(scenario.quant.name, ACTIVATION_BYTES)
    gathered = tokens * (model.hidden_size * activation + 8 * model.experts_per_token)
    gather = measured_collective_s(gpu, "all_gather", tp, gathered, "int8")  # one-byte elements: the bytes
    scatter = measured_collective_s(gpu, "reduce_scatter", tp, tokens * model.hidden_size)
    return None if gather is None or scatter is None else gather + scatter


def steady_load(scenario: Scenario, batch: float) -> StepLoad:
    """An iteration in steady state: `batch` sequences decoding, and the prefill of the requests that
    replace the ones finishing (batch/osl requests per step, isl tokens each), spread evenly."""
    isl, osl = scenario.isl, scenario.osl
    return StepLoad(decode=batch, decode_context=isl + osl / 2, prefill_tokens=batch * isl / osl,
                    prefill_context=isl / 2, logits_tokens=batch)


def iteration_mix(scenario: Scenario, batch: float, prefill_per_step: float, build: dict[str, Any]) -> list[tuple[float, StepLoad]]:
    """Steady state as the scheduler runs it: prompts are not spread evenly over the iterations but come in
    whole chunks. TensorRT-LLM's micro-batch scheduler fills an iteration's max_num_tokens with the decode
    tokens first, then context tokens (chunks of a prompt when chunked prefill is on, whole prompts when it
    is off), so a share of the iterations carries ~max_num_tokens - batch prompt tokens (compute-bound) and
    the rest decode only (weight- and KV-read-bound). As GEMM time is the longer of weight reads and compute,
    the mean of the two kinds exceeds one iteration at the mean load. (weight, load) pairs; weights sum to 1."""
    isl, osl = scenario.isl, scenario.osl

    def carrying(prefill_tokens: float) -> StepLoad:  # `batch` sequences decoding beside this many prompt tokens
        return StepLoad(decode=batch, decode_context=isl + osl / 2, prefill_tokens=prefill_tokens, prefill_context=isl / 2,
                        logits_tokens=batch)

    if prefill_per_step <= 0:
        return [(1.0, carrying(0))]
    if not build.get("chunked_prefill", True):  # tried as whole prompts; worse held out (README), so spread evenly
        return [(1.0, carrying(prefill_per_step))]
    chunk = max(1.0, build["max_num_tokens"] - batch, prefill_per_step)  # the token budget left beside the decodes
    share = prefill_per_step / chunk
    return [(1 - share, carrying(0)), (share, carrying(chunk))]


def mean_step(scenario: Scenario, mix: list[tuple[float, StepLoad]], eff: Efficiency) -> StepTime:
    """The iteration-weighted mean of the phases of a mix of iterations."""
    steps = [(w, step_time(scenario, load, eff)) for w, load in mix if w > 0]
    return StepTime(*(sum(w * getattr(step, name) for w, step in steps) for name in StepTime.__dataclass_fields__))


def prefill_time(scenario: Scenario, max_num_tokens: int, eff: Efficiency = EFFICIENCY) -> float:
    """Seconds to prefill one ISL-token prompt alone, in chunks of max_num_tokens. Under attention data parallelism the
    other GPUs, idle, each run one dummy generation token so that every rank takes part in the MoE layers' collectives
    (PyExecutor._pad_attention_dp_dummy_request, tensorrt_llm/_torch/pyexecutor/py_executor.py @9521caf4)."""
    isl = scenario.isl
    chunk = max(1, min(isl, max_num_tokens))
    idle_peers = scenario.ranks - 1
    total, done = 0.0, 0
    while done < isl:
        size = min(chunk, isl - done)
        load = StepLoad(decode=0, decode_context=0, prefill_tokens=size, prefill_context=done + size / 2, logits_tokens=1,
                        peer_tokens=idle_peers)
        total += step_time(scenario, load, eff).total_s
        done += size
    return total


class Prediction(BaseModel):
    model_config = ConfigDict(frozen=True)

    concurrency: int
    batch: int  # sequences actually in flight (concurrency capped by KV capacity and build limits)
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    output_tokens_per_s_per_user: float
    request_latency_s: float


# The executor's dynamic batch-size tuner (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/executor/dynamicBatchTuner.cpp
# getRuntimeBatchSize and dynamicBatchConfig.cpp kDefaultBatchSizeTable; granularity 512 / threshold 128 in
# dynamicBatchTuner.h; stored copies ids 36930421719, 250915467, 37778540625), which trtllm-bench turns on
# (tensorrt_llm/bench/dataclasses/configuration.py@000a01de ExecutorSettingsConfig.dynamic_max_batch_size = True): from
# the KV capacity in ISL+OSL sequences it picks the runtime max batch size from this table, else rounds down to 512
# when within 128 of it.
_BATCH_SIZE_TABLE = ((144, 128), (336, 256), (672, 512), (832, 768), (1280, 1024), (1664, 1536))


def tuned_batch_size(capacity: int) -> int:
    """The runtime max batch size the dynamic tuner picks for a KV capacity of `capacity` sequences."""
    for limit, size in _BATCH_SIZE_TABLE:
        if capacity < limit:
            return size
    floor = capacity // 512 * 512
    return floor if capacity < floor + 128 else capacity


def _sustainable_batch(memory: MemoryPlan, build: dict[str, Any], isl: int, osl: int) -> int:
    """Sequences the runtime keeps in flight: KV capacity (no-evict scheduling reserves ISL+OSL),
    max_batch_size (and the dynamic tuner's pick when the build asks for it), and the max_num_tokens
    budget for decode tokens plus their prefill share."""
    token_budget = build["max_num_tokens"] / (1 + isl / osl)
    return max(1, int(min(_in_flight_limit(memory, build), max(1, token_budget))))


def runtime_batch_size(memory: MemoryPlan, build: dict[str, Any]) -> int:
    """The runtime's batch limit: max_batch_size, and the dynamic tuner's pick when the build asks for it."""
    limit = build["max_batch_size"]
    if build.get("dynamic_batch_size"):
        limit = min(limit, tuned_batch_size(memory.max_sequences))
    return limit


def _in_flight_limit(memory: MemoryPlan, build: dict[str, Any]) -> int:
    """Requests the runtime holds at once under no-evict admission: its batch limit and the KV capacity at ISL+OSL each."""
    return max(1, min(memory.max_sequences, runtime_batch_size(memory, build)))


def predict(
    scenario: Scenario, concurrency: int, *, build: dict[str, Any] | None = None, efficiency: Efficiency | None = None,
) -> Prediction:
    """TTFT, TPOT and output tokens/s for a closed loop of `concurrency` clients (each sends its next
    request when the last one finishes), on an engine built with `build` (default: recommend_build
    for throughput). With attention data parallelism the clients are spread evenly over the GPUs, each scheduling its
    share within the build's limits."""
    scenario.check()
    isl, osl = scenario.isl, scenario.osl
    eff = efficiency or EFFICIENCY
    if concurrency < 1:
        raise InvalidInputError("Concurrency must be at least 1.", hint="e.g. --concurrency 8")
    build = build or recommend(scenario, "throughput")
    memory = fitting_memory(scenario, build)
    ranks = scenario.ranks
    clients = concurrency / ranks  # per GPU that schedules apart
    batch = min(clients, _sustainable_batch(memory, build, isl, osl))
    ttft = prefill_time(scenario, build["max_num_tokens"], eff)
    # Other clients' prompts are prefilled inside our decode steps: (batch - 1)/osl of them per step, in chunks.
    step = mean_step(scenario, iteration_mix(scenario, batch, (batch - 1) * isl / osl, build), eff).total_s
    if batch > 1:
        ttft += step / 2  # a new request waits on average half an iteration to join the batch
    latency = ttft + (osl - 1) * step
    throughput = batch * osl / latency
    if clients > batch:  # the rest queue (Little's law): each waits for clients - batch requests to finish
        ttft += (clients - batch) / (throughput / osl)
        latency = ttft + (osl - 1) * step
    return Prediction(
        concurrency=concurrency,
        batch=int(batch * ranks),
        ttft_ms=round(ttft * 1e3, 3),
        tpot_ms=round(step * 1e3, 3),
        output_tokens_per_s=round(throughput * ranks, 2),
        output_tokens_per_s_per_user=round(osl / latency, 3),
        request_latency_s=round(latency, 4),
    )


class ThroughputEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    batch: int
    step_ms: float
    output_tokens_per_s: float
    bound: str  # what dominates an iteration
    phases_ms: dict[str, float]


def max_throughput(
    scenario: Scenario, *, build: dict[str, Any] | None = None, efficiency: Efficiency | None = None,
    requests: int | None = None,
) -> ThroughputEstimate:
    """Output tokens/s of an offline max-load run (trtllm-bench throughput): the batch the KV cache
    and build limits allow, each iteration carrying its share of prefill.

    requests: how many equal ISL/OSL requests the run is given at once (None: as many as it takes to reach steady
    state). A finite run is replayed iteration by iteration as the scheduler serves it (planner/offline.py: the batch
    filling as the token budget admits prompts, waves, the last requests draining it; admitted no-evict, or, for a build
    whose capacity_scheduler_policy is "max_utilization", as that scheduler admits and pauses them); throughput is its
    output tokens over the sum of its iterations' times, and the phases its iterations' mean. With attention data
    parallelism each GPU schedules its share of the requests alone, in step with the others; the batch is all GPUs'
    together."""
    scenario.check()
    model, gpu, quant, tp = scenario.model, scenario.gpu, scenario.quant, scenario.tp
    eff = efficiency or EFFICIENCY
    build = build or recommend(scenario, "throughput")
    memory = fitting_memory(scenario, build)
    batch = _sustainable_batch(memory, build, scenario.isl, scenario.osl)
    ranks = scenario.ranks
    if requests is None:
        step = mean_step(scenario, iteration_mix(scenario, batch, batch * scenario.isl / scenario.osl, build), eff)
        tokens_per_s = batch / step.total_s
    else:
        requests = max(1, -(-requests // ranks))  # one GPU's share
        batch = min(batch, requests)
        if build.get("capacity_scheduler_policy") == "max_utilization":
            run = max_utilization_schedule(scenario.isl, scenario.osl, requests, RunLimits(
                runtime_batch_size(memory, build), build["max_num_tokens"], build.get("chunked_prefill", True),
                memory.kv_capacity_tokens))
        else:
            run = offline_schedule(scenario.isl, scenario.osl, requests, _in_flight_limit(memory, build),
                                   build["max_num_tokens"], build.get("chunked_prefill", True))
        iterations = run.iterations
        step = mean_step(scenario, [(group.iterations / iterations, StepLoad(
            group.decode, group.decode_context, group.prefill_tokens, group.prefill_context, group.logits_tokens))
            for group in run.groups], eff)
        tokens_per_s = run.output_tokens / (step.total_s * iterations)
    phases = {
        "gemm": step.gemm_s, "decode_attention": step.decode_attention_s,
        "context_attention": step.context_attention_s, "allreduce": step.allreduce_s, "overhead": step.overhead_s,
    }
    read_s = (weight_bytes_read_per_step(model, quant, tp, batch * ranks, attention_dp=scenario.attention_dp)
              / (hbm_bandwidth(gpu) * eff.bandwidth))
    gemm_bound = "weight reads" if gemm_roofline_s(read_s, read_s, eff.gemm_roofline_exponent) >= step.gemm_s else "GEMM compute"
    dominant = max(phases, key=phases.get)
    bound = gemm_bound if dominant == "gemm" else {
        "decode_attention": "KV reads", "context_attention": "context attention",
        "allreduce": "expert all-gather" if scenario.attention_dp else "TP all-reduce", "overhead": "step overhead",
    }[dominant]
    return ThroughputEstimate(
        batch=batch * ranks,
        step_ms=round(step.total_s * 1e3, 3),
        output_tokens_per_s=round(tokens_per_s * ranks, 2),
        bound=bound,
        phases_ms={k: round(v * 1e3, 3) for k, v in phases.items()},
    )


"""The iteration model: one in-flight-batching iteration is a handful of phases run one after the other.

The GEMMs read every weight once and do 2 FLOPs per parameter per token, so they take the longer of
the two (bandwidth-bound at small batch, compute-bound at large batch), or, where a backend's constants say so, the
2-norm of the two (near the ridge neither bound is reached); decode attention reads each
sequence's KV cache (bandwidth-bound); context attention is compute-bound (causal, ~ISL^2); tensor
parallelism adds two all-reduces per layer; every iteration pays a fixed launch cost per layer.
planner.timing turns iterations into TTFT, TPOT and throughput.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pipeline.core.quant import quant_format
from pipeline.planner.comm import measured_allreduce_s, measured_collective_s
from pipeline.planner.latent import LatentDecode, measured_decode_s
from pipeline.planner.memory import (ACTIVATION_BYTES, kv_bytes_per_token, kv_heads_per_gpu, sixteen_bit_params,
                                     weight_bytes_read_per_step)
from pipeline.planner.moe_timing import measured_moe_s
from pipeline.planner.rates import (ALLREDUCE_EFFICIENCY, EFFICIENCY, Efficiency, attention_rate, compute_rate, hbm_bandwidth,
                                    kv_read_fraction, link_bandwidth, measured_gemm_rate)
from pipeline.planner.scenario import Scenario
from pipeline.planner.stages import handovers_s

BF16 = quant_format("bf16")
FP8 = quant_format("fp8")


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
    send_s: float = 0.0  # pipeline stages handing the micro-batch on

    @property
    def total_s(self) -> float:
        return (self.gemm_s + self.decode_attention_s + self.context_attention_s + self.allreduce_s + self.overhead_s
                + self.send_s)


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


def _measured_kv_fraction(scenario: Scenario) -> float | None:
    model, tp = scenario.model, scenario.attention_tp
    if model.latent_attention:  # silicon's table times grouped-query attention only
        return None
    return kv_read_fraction(scenario.gpu.key, scenario.kv.bytes_per_element, model.head_dim, model.num_heads / tp,
                            kv_heads_per_gpu(model, tp))


def kv_fraction(scenario: Scenario, eff: Efficiency) -> float:
    """The fraction of datasheet bandwidth at which decode attention reads the KV cache: as measured on silicon for one
    rank's attention shape where the backend's constants say so and the GPU has a figure, else the weight reads' fraction."""
    measured = _measured_kv_fraction(scenario) if eff.kv_bandwidth_measured else None
    return eff.bandwidth if measured is None else measured


@dataclass(frozen=True)
class StepWork:
    """What one iteration does (bytes, FLOPs, the rates silicon offers, the collectives' seconds) before the fitted
    constants turn it into seconds (`time`). It depends on the constants' structure (Efficiency.structure) only, so a fit
    that varies their numbers lays each iteration out once."""

    structure: tuple[bool, ...]
    decode: float
    prefill_tokens: float
    tokens: float
    hbm: float  # datasheet bytes/s
    gemm_rate: float  # FLOP/s of the GEMMs' dtype, before the compute fraction
    activation_bits: int
    attention_rate: float  # FLOP/s of 16-bit math (attention, lm_head), before the 16-bit fraction
    dense_param_tokens: float  # (active parameters outside the routed experts) x tokens, per GPU
    routed_params: float | None  # routed experts' active parameters per token (None: the MoE layer is timed apart)
    expert_tokens: float
    tp: int
    sixteen_bit_flops: float  # the lm_head's FLOPs and those of the linear layers the checkpoint keeps 16-bit, per GPU
    read_bytes: float
    moe_s: float  # the MoE layers' measured seconds
    kv_read_bytes: float
    kv_fraction: float | None  # measured on silicon (None: the weight reads' fraction)
    latent_decode: LatentDecode | None  # latent attention's decode (None: grouped-query attention, bound by its reads)
    context_flops: float
    allreduce_s: float
    num_layers: int
    sequence_layers: float  # (sequences the executor walks each iteration) x the model's layers: the per-sequence cost's count
    stages: int = 1  # pipeline stages the micro-batch goes through, each as long as the one laid out here
    send_s: float = 0.0  # the hand-overs between them

    def time(self, eff: Efficiency) -> StepTime:
        if eff.structure != self.structure:
            raise ValueError("These constants have another structure than the one this iteration was laid out for.")
        bandwidth = self.hbm * eff.bandwidth
        rate = self.gemm_rate * eff.compute_for(self.activation_bits)
        attn_rate = self.attention_rate * eff.compute_16bit
        expert_params = 0.0 if self.routed_params is None else self.routed_params / eff.moe_expert_compute
        layer_flops = 2 * (self.dense_param_tokens + expert_params * self.expert_tokens / self.tp)
        gemm_compute_s = layer_flops / rate + self.sixteen_bit_flops / attn_rate
        gemm_s = gemm_roofline_s(self.read_bytes / bandwidth, gemm_compute_s, eff.gemm_roofline_exponent) if self.tokens else 0.0
        gemm_s += self.moe_s
        kv_fraction = eff.bandwidth if self.kv_fraction is None else self.kv_fraction
        decode_attention_s = self.kv_read_bytes / (self.hbm * kv_fraction) if self.kv_read_bytes else 0.0
        if self.latent_decode and self.kv_read_bytes:
            decode_attention_s = self.latent_decode.seconds(eff.compute_for(self.latent_decode.bits), decode_attention_s)
        context_attention_s = self.context_flops / attn_rate if attn_rate else 0.0
        overhead_s = eff.step_overhead_per_layer_s * self.num_layers + eff.per_sequence_layer_s * self.sequence_layers
        n = self.stages
        return StepTime(self.decode, self.prefill_tokens, n * gemm_s, n * decode_attention_s, n * context_attention_s,
                        n * self.allreduce_s, n * overhead_s, self.send_s)


def step_time(scenario: Scenario, load: StepLoad, eff: Efficiency = EFFICIENCY) -> StepTime:
    """Seconds for one iteration of `load` (the scenario's isl/osl are not used: the load says it all). With attention
    data parallelism the load is one GPU's, every GPU carrying as much."""
    return step_work(scenario, load, eff).time(eff)


def step_work(scenario: Scenario, load: StepLoad, eff: Efficiency = EFFICIENCY) -> StepWork:
    """One iteration of `load`, laid out for constants of `eff`'s structure. With pipeline stages: one micro-batch's way
    through all of them, each timed as the fullest (planner.stages), and the hand-overs between them."""
    if scenario.pp > 1:
        tokens = load.decode + load.prefill_tokens
        send_s = handovers_s(scenario.model, scenario.gpu, scenario.tp, scenario.pp, tokens)
        # The per-layer cost is each stage's for its own layers; the per-sequence cost is host work on every request in
        # flight (each executor iteration walks all of them: py_executor.py @9521caf4 _handle_responses), which each stage
        # pays per micro-batch for the pp micro-batches' requests.
        in_flight = load.decode * scenario.pp
        return dataclasses.replace(step_work(scenario.stage, load, eff), stages=scenario.pp, send_s=send_s,
                                   sequence_layers=in_flight * scenario.model.num_layers)
    model, gpu, quant, kv, tp = scenario.model, scenario.gpu, scenario.quant, scenario.kv, scenario.tp
    adp, attention_tp = scenario.attention_dp, scenario.attention_tp
    decode, prefill_tokens = load.decode, load.prefill_tokens
    tokens = decode + prefill_tokens
    # the experts see every rank's tokens
    expert_tokens = tokens * scenario.ranks if load.peer_tokens is None else tokens + load.peer_tokens
    logits = decode if load.logits_tokens is None else load.logits_tokens
    if eff.gemm_rate_measured:  # shares of the rate measured on silicon, 16-bit math at the BF16 GEMMs' rate
        gemm_rate, attn_rate = measured_gemm_rate(gpu, quant), measured_gemm_rate(gpu, BF16)
    else:  # attention, the (unquantized) lm_head and the layers a checkpoint keeps 16-bit run in 16-bit
        gemm_rate, attn_rate = compute_rate(gpu, quant), attention_rate(gpu)
    # GEMMs: weights read once per step; 2 FLOPs per active weight per token. An MoE's routed experts take the MoE layer
    # time measured on silicon where the backend's constants say so and the table has the shape, else their own share.
    moe_layer_s = (measured_moe_s(gpu, quant, model, tp, expert_tokens, expert_parallel=adp)
                   if eff.moe_measured and tokens else None)
    experts, kept = model.routed_active_params_per_token, sixteen_bit_params(model, quant)  # kept: in 16-bit GEMMs
    # an MoE's untouched experts are not read (nor, where they are timed apart, any of them)
    read_bytes = weight_bytes_read_per_step(model, quant, tp, expert_tokens, routed_experts=moe_layer_s is None,
                                            attention_dp=adp)
    # Decode attention: every sequence reads its whole KV cache (a sliding-window layer its last W tokens, a chunked layer
    # its own chunk, where the backend runs them so).
    local = eff.sliding_windows
    attended = decode * (model.attended_tokens(load.decode_context) if local else load.decode_context)
    kv_read = attended * kv_bytes_per_token(model, kv, attention_tp)
    # Context attention: QK^T and PV, 2 FLOPs each per (query, key, head, dim), causal span.
    heads = model.num_heads / attention_tp
    span = model.attended_tokens(load.prefill_context, prefill=True) if local else load.prefill_context
    latent = model.latent_attention
    pair_flops = latent.context_flops_per_pair(heads) if latent else 4 * heads * model.head_dim
    context_flops = model.num_layers * pair_flops * prefill_tokens * span
    return StepWork(
        structure=eff.structure, decode=decode, prefill_tokens=prefill_tokens, tokens=tokens, hbm=hbm_bandwidth(gpu),
        gemm_rate=gemm_rate, activation_bits=quant.activation_bits, attention_rate=attn_rate,
        dense_param_tokens=(model.active_params_per_token - experts - kept) * tokens / attention_tp,
        routed_params=None if moe_layer_s is not None else experts, expert_tokens=expert_tokens, tp=tp,
        sixteen_bit_flops=(model.head_flops_per_token * logits + 2 * kept * tokens) / attention_tp, read_bytes=read_bytes,
        moe_s=(moe_layer_s or 0.0) * model.moe_layer_count, kv_read_bytes=kv_read,
        kv_fraction=_measured_kv_fraction(scenario) if kv_read and eff.kv_bandwidth_measured else None,
        latent_decode=_latent_decode(scenario, eff, decode, attended) if latent else None,
        context_flops=context_flops, allreduce_s=_allreduce_s(scenario, tokens, expert_tokens), num_layers=model.num_layers,
        sequence_layers=decode * model.num_layers,
    )


def _latent_decode(scenario: Scenario, eff: Efficiency, decode: float, attended: float) -> LatentDecode:
    """Latent attention's decode over `attended` cached tokens of `decode` sequences: with an FP8 cache the query is
    quantized too and both products run in FP8 (attentionOp.cpp mFP8GenerationMLA: trtllm-gen on Blackwell, fmha_v2 E4M3
    on Hopper), else in 16-bit; silicon's time for it where the GPU was timed (planner/latent.py)."""
    model, kv = scenario.model, scenario.kv
    latent, heads = model.latent_attention, model.num_heads / scenario.attention_tp
    math_format, bits = (FP8, 8) if kv.bytes_per_element <= 1 else (BF16, 16)
    rate = measured_gemm_rate(scenario.gpu, math_format) if eff.gemm_rate_measured else compute_rate(scenario.gpu, math_format)
    layer_s = measured_decode_s(latent, scenario.gpu.key, kv.bytes_per_element, heads, decode, attended)
    return LatentDecode(flops=model.num_layers * latent.decode_flops_per_key(heads) * attended, rate=rate, bits=bits,
                        measured_s=None if layer_s is None else model.num_layers * layer_s)


def _allreduce_s(scenario: Scenario, tokens: float, expert_tokens: float) -> float:
    """TP: two all-reduces of the hidden states per layer, as measured on this GPU where the table has it, else
    estimated (ring: 2(tp-1)/tp of the bytes per GPU). Attention data parallelism instead gathers every rank's tokens
    before each MoE layer and scatters the sums back after it (_expert_exchange_s); where NCCL's figures are missing,
    as the one all-reduce of all the tokens the two together move."""
    model, gpu, tp, adp = scenario.model, scenario.gpu, scenario.tp, scenario.attention_dp
    if tp <= 1 or not tokens:
        return 0.0
    elements = expert_tokens * model.hidden_size
    per_call = _expert_exchange_s(scenario, expert_tokens) if adp else None
    per_call = per_call or measured_allreduce_s(gpu, tp, elements)
    if per_call is None:
        link, latency = link_bandwidth(gpu, tp)
        per_call = latency + 2 * (tp - 1) / tp * elements * ACTIVATION_BYTES / (link * ALLREDUCE_EFFICIENCY)
    return (model.moe_layer_count if adp else 2 * model.num_layers) * per_call


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
    return weighted_mean([(w, step_time(scenario, load, eff)) for w, load in mix if w > 0])


def weighted_mean(steps: list[tuple[float, StepTime]]) -> StepTime:
    """Each phase's mean over iterations of these weights."""
    return StepTime(*(sum(w * getattr(step, name) for w, step in steps) for name in StepTime.__dataclass_fields__))

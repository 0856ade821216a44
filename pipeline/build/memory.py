"""Memory pre-check and per-goal engine limits, taken from the capacity planner (pipeline/planner/).

The planner owns the arithmetic (weight bytes per precision, GQA-aware KV bytes per token,
activation buffers at max_num_tokens / max_batch_size, runtime reserve, KV fraction) and the
recommended max_batch_size / max_num_tokens per goal, and pipeline parallelism (planner/stages.py: the fullest
stage's memory, one micro-batch's limits). This module only adapts it to an engine build: the CPU "device" (host
memory), the user's overrides, and the hints that say what would fit instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import psutil
from pydantic import BaseModel, ConfigDict

from pipeline import planner
from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import GpuSpec, gpu_table
from pipeline.planner import Goal, ModelSpec, Scenario
from pipeline.planner.cpu import CPU_DEFAULTS
from pipeline.core.quant import KvCacheFormat, QuantFormat

GIB = float(planner.GIB)
LOW_MEMORY_SEQUENCES = 4  # fewer full-length sequences than this in the KV cache: "low memory"
TP_CHOICES = (1, 2, 4, 8)
LORA_CACHE_DEFAULT_FRACTION = 0.05  # the backend's lora_cache_gpu_memory_fraction default (see estimate)


class Limits(BaseModel):
    """The engine's shape limits (what trtllm-build calls max_*)."""

    model_config = ConfigDict(frozen=True)

    max_input_len: int
    max_seq_len: int
    max_batch_size: int
    max_num_tokens: int

    @property
    def isl_osl(self) -> tuple[int, int]:
        return self.max_input_len, self.max_seq_len - self.max_input_len


@dataclass(frozen=True)
class EngineTarget:
    """What an engine is built for, made once per build: a model's shapes on a GPU at a precision,
    split tp x pp, for a goal. `scenario(isl, osl)` is the planner's Scenario of it."""

    model: ModelSpec
    gpu: GpuSpec
    quant: QuantFormat
    kv: KvCacheFormat
    tp: int = 1
    pp: int = 1
    goal: Goal = "throughput"
    attention_dp: bool = False  # the PyTorch backend's DEP: memory and limits per GPU (planner Scenario.attention_dp)

    def on(self, gpu: GpuSpec) -> EngineTarget:
        return replace(self, gpu=gpu)

    def scenario(self, isl: int, osl: int) -> Scenario:
        """The planner's scenario on the device (host memory for the CPU), unchecked: with pp stages, its memory plans are
        the fullest stage's (planner/stages.py) and its limits one micro-batch's."""
        return Scenario(self.model, _device(self.gpu), self.quant, self.kv, self.tp, isl, osl, attention_dp=self.attention_dp,
                        pp=self.pp)


class MemoryEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu: str
    gpu_memory_gib: float
    weights_gib: float  # per GPU
    activation_gib: float
    overhead_gib: float
    kv_bytes_per_token: float  # per GPU
    kv_one_sequence_gib: float
    needed_gib: float  # weights + activations + overhead + LoRA cache + one max_seq_len sequence
    kv_capacity_tokens: int
    max_full_sequences: int
    fits: bool
    low_memory: bool
    lora_cache_gib: float = 0.0  # every adapter of a --lora build resident on the GPU
    lora_cache_fraction: float | None = None  # of the memory left after the KV cache: the lora_cache_gpu_memory_fraction


def _device(gpu: GpuSpec) -> GpuSpec:
    if gpu.memory_gib:
        return gpu
    # the CPU "device" of the reference runtime: host memory
    return gpu.model_copy(update={"memory_gib": round(psutil.virtual_memory().total / GIB, 1)})


def estimate(target: EngineTarget, limits: Limits, lora_bytes: int = 0) -> MemoryEstimate:
    """lora_bytes: the LoRA cache (every adapter resident). TensorRT-LLM's backend carves its device cache from
    the memory left after the KV cache (lora_cache_gpu_memory_fraction of it, default 0.05: tensorrtllm_backend
    @b9cc2248 docs/model_config.md:145-153), so the estimate counts it there and the KV cache gives up only what
    that leftover cannot hold."""
    scenario = target.scenario(*limits.isl_osl)
    plan = planner.memory_plan(scenario, max_num_tokens=limits.max_num_tokens, max_batch_size=limits.max_batch_size)
    activation = planner.activation_bytes(scenario.model, scenario.attention_tp, limits.max_num_tokens, limits.max_batch_size) / GIB
    one_sequence = plan.kv_bytes_per_token * limits.max_seq_len / GIB
    capacity, sequences, fits = plan.kv_capacity_tokens, plan.max_sequences, plan.fits
    lora, fraction = lora_bytes / GIB, None
    if lora_bytes:
        leftover = plan.free_gib - plan.kv_cache_gib
        squeeze = max(0.0, lora - leftover)
        if squeeze:
            capacity = max(0, int((plan.kv_cache_gib - squeeze) * GIB // plan.kv_bytes_per_token))
            sequences = capacity // limits.max_seq_len
            fits = sequences >= 1
        fraction = min(1.0, max(LORA_CACHE_DEFAULT_FRACTION, math.ceil(100 * lora / leftover) / 100 if leftover else 1.0))
    return MemoryEstimate(
        gpu=target.gpu.key, gpu_memory_gib=plan.gpu_memory_gib, weights_gib=plan.weights_gib,
        activation_gib=round(activation, 3), overhead_gib=planner.RUNTIME_RESERVE_GIB,
        kv_bytes_per_token=plan.kv_bytes_per_token, kv_one_sequence_gib=round(one_sequence, 4),
        needed_gib=round(plan.weights_gib + plan.reserve_gib + lora + one_sequence, 3),
        kv_capacity_tokens=capacity, max_full_sequences=sequences, fits=fits,
        low_memory=fits and sequences < LOW_MEMORY_SEQUENCES,
        lora_cache_gib=round(lora, 4), lora_cache_fraction=fraction,
    )


def default_limits(
    target: EngineTarget, *, max_input_len: int | None = None, max_seq_len: int | None = None,
    max_batch_size: int | None = None, max_num_tokens: int | None = None,
) -> Limits:
    """Lengths default to 1024 in / 2048 total (capped by max_position_embeddings); max_batch_size and
    max_num_tokens come from the planner's recommendation for the goal. Every value given wins."""
    max_pos = int(target.model.max_position_embeddings or 2048)
    seq = max_seq_len or min(2048, max_pos)
    inp = max_input_len or min(1024, seq // 2)
    if seq > max_pos:
        raise UnsupportedError(f"max_seq_len {seq} is beyond the model's max_position_embeddings ({max_pos}).",
                               hint=f"Use --max-seq-len {max_pos} or less.")
    if inp >= seq:
        raise UnsupportedError(f"max_input_len ({inp}) must be smaller than max_seq_len ({seq}).",
                               hint="Leave room for generated tokens, e.g. --max-input-len 1024 --max-seq-len 2048.")
    batch, tokens = max_batch_size, max_num_tokens
    if batch is None or tokens is None:
        recommended = _recommended(target, inp, seq)
        batch = batch or recommended["max_batch_size"]
        tokens = tokens or recommended["max_num_tokens"]
    return Limits(max_input_len=inp, max_seq_len=seq, max_batch_size=batch, max_num_tokens=tokens)


def _recommended(target: EngineTarget, inp: int, seq: int) -> dict[str, int]:
    """The planner's recommendation. The CPU has no datasheet figures: the reference runtime gets a
    small fixed batch. Where nothing fits, the smallest limits are returned so that the build's own
    pre-check refuses with the memory breakdown and what would fit."""
    smallest = {"max_batch_size": 8, "max_num_tokens": max(2048, inp)}
    if target.gpu.is_cpu:
        return {**smallest, **CPU_DEFAULTS[target.goal]}
    try:
        return planner.recommend_build(target.scenario(inp, seq - inp), target.goal)
    except UnsupportedError:
        small = Limits(max_input_len=inp, max_seq_len=seq, **smallest)
        if estimate(target, small).fits:
            raise
        return smallest


def what_would_fit(target: EngineTarget, limits: Limits, *, roomy: bool = False) -> list[str]:
    """Alternatives that fit where the asked configuration does not (the planner's TP / precision
    alternatives, then a smaller max_num_tokens, a shorter max_seq_len, a roomier GPU); with
    roomy=True only those that leave room for LOW_MEMORY_SEQUENCES full-length sequences."""
    least = LOW_MEMORY_SEQUENCES if roomy else 1

    def ok(e: MemoryEstimate) -> bool:
        return e.fits and e.max_full_sequences >= least

    gpu, quant, kv = target.gpu, target.quant, target.kv
    isl, _ = limits.isl_osl
    ideas = [
        (f"--tp {a.tp}" if a.pp == target.pp else f"--pp {a.pp} (an engine: convert again with it)")
        if a.quant == quant.name and a.kv_cache == kv.name
        else f"--quant {a.quant}" + ("" if a.kv_cache == "auto" else f" --kv-cache {a.kv_cache}") + " (convert again)"
        for a in planner.alternatives(target.scenario(*limits.isl_osl))
        if a.max_sequences >= least and not gpu.is_cpu
    ]
    smaller = max(isl, 2048)
    if smaller < limits.max_num_tokens and ok(estimate(target, limits.model_copy(update={"max_num_tokens": smaller}))):
        ideas.append(f"--max-num-tokens {smaller}")
    shorter = limits.max_seq_len // 2
    if shorter > isl and ok(estimate(target, limits.model_copy(update={"max_seq_len": shorter}))):
        ideas.append(f"--max-seq-len {shorter}")
    roomier = [g.key for g in gpu_table().values()
               if not g.is_cpu and not gpu.is_cpu and g.can_run(quant) and g.can_run_kv(kv)
               and (g.memory_gib or 0) > (gpu.memory_gib or 0) and ok(estimate(target.on(g), limits))]
    if roomier:
        ideas.append(f"a GPU with more memory ({', '.join(roomier[:4])})")
    return ideas


"""Build recommendations: the trtllm-build limits (max_batch_size, max_num_tokens, lengths, KV fraction)
for a Scenario and a goal."""

from __future__ import annotations

import math
from typing import Any

from pipeline.planner.memory import DEFAULT_KV_FRACTION, fitting_memory, memory_plan
from pipeline.planner.scenario import Goal, Scenario

MAX_BATCH_CAP = 4096  # beyond this the decoder buffers grow without throughput gain
MAX_NUM_TOKENS_CAP = 32768


def round_up(value: float, step: int) -> int:
    return int(step * math.ceil(value / step))


def _batch_from_capacity(sequences: float) -> int:
    """A max_batch_size a little above what the KV cache holds (the runtime caps it there anyway)."""
    sequences = max(1.0, min(sequences, MAX_BATCH_CAP))
    if sequences < 256:
        return max(8, round_up(sequences, 32) if sequences > 32 else round_up(sequences, 8))
    return round_up(sequences, 128 if sequences < 1024 else 256)


def tokens_for(batch: float, isl: int, osl: int) -> int:
    """max_num_tokens: enough for the batch's decode tokens plus its average share of prefill (trtllm-bench's own rule,
    tensorrt_llm/bench/build/tuning.py finetune_setting: capped at 32768, stepped 256/512/1024, at least 2048)."""
    raw = min(batch * (1 + isl / osl), MAX_NUM_TOKENS_CAP)
    step = 256 if raw < 4096 else 512 if raw < 8192 else 1024
    return max(2048, round_up(raw, step))


def recommend_build(scenario: Scenario, goal: Goal) -> dict[str, Any]:
    """trtllm-build limits for this model on this GPU: max_batch_size, max_num_tokens, max_input_len,
    max_seq_len, kv_cache_free_gpu_mem_fraction. Throughput: as many sequences as the KV cache holds
    at ISL+OSL (and tokens for their prefill share); latency: a small batch, prompts in one chunk.
    Raises UnsupportedError (naming what would fit) when not even one ISL+OSL sequence fits."""
    scenario.check()
    build = recommend(scenario, goal)
    fitting_memory(scenario, build)
    return build


def recommend(scenario: Scenario, goal: Goal) -> dict[str, Any]:
    """The recommendation without the checks (the scenario is already checked)."""
    isl, osl = scenario.isl, scenario.osl
    kv_fraction = 0.95 if goal == "throughput" else DEFAULT_KV_FRACTION
    # capacity before activations: the activations this recommendation causes are small next to it
    capacity = memory_plan(scenario, max_num_tokens=0, max_batch_size=0, kv_fraction=kv_fraction)
    sequences = capacity.sequences_per_micro_batch
    if goal == "throughput":
        max_batch_size = _batch_from_capacity(sequences)
        max_num_tokens = tokens_for(max_batch_size, isl, osl)
    else:
        max_batch_size = max(1, min(sequences, 64))
        max_num_tokens = max(2048, min(round_up(isl + max_batch_size, 256), MAX_NUM_TOKENS_CAP))
    max_seq_len = isl + osl
    return {
        "max_batch_size": int(max_batch_size),
        "max_num_tokens": int(max_num_tokens),
        "max_input_len": int(min(isl, max_seq_len)),
        "max_seq_len": int(max_seq_len),
        "kv_cache_free_gpu_mem_fraction": kv_fraction,
    }


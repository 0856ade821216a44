"""How big the reference runtime's paged KV cache is, and which requests it lets in.

Sizing follows TensorRT-LLM's KvCacheConfig (the `max_tokens_in_paged_kv_cache` and
`kv_cache_free_gpu_mem_fraction` parameters of the tensorrt_llm model): the cache holds
`max_tokens_in_paged_kv_cache` tokens, or `fraction` of the memory that is free once the model is
loaded, the smaller of the two when both are given. On the CPU "free memory" is host memory as this
process can get it: MemAvailable, capped by what is left of its cgroup's limit (a container's
`memory.max`). Unlike a GPU engine the cache is also capped at max_batch_size x max_seq_len tokens,
the most the batch can ever hold at once: transformers allocates (and zeroes) the whole cache up
front, and 90% of a host's RAM would be taken for nothing.

Admission follows the `batch_scheduler_policy` of TensorRT-LLM's capacity scheduler:
- guaranteed_no_evict: a request starts only when the blocks for its prompt plus every token it may
  generate are free (reserved until it ends), so a started request never waits for KV blocks;
  others queue, in arrival order.
- max_utilization: a request starts whenever a batch slot is free; the batching manager allocates
  blocks as tokens arrive and, when the cache runs full, pauses the newest requests (their blocks are
  freed and they are recomputed later), as TensorRT-LLM pauses requests.
`gpt_model_type` V1 (static batching) starts a new batch only when the previous one has ended.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

SchedulerPolicy = Literal["guaranteed_no_evict", "max_utilization"]
Batching = Literal["inflight", "static"]

GIB = float(1 << 30)


class KvCacheError(ValueError):
    """The KV-cache settings leave no room for even one block."""


@dataclass(frozen=True)
class KvCacheBudget:
    """What the cache may take (TensorRT-LLM's KvCacheConfig): `free_fraction` of `free_memory_bytes` (the host
    memory free once the model is loaded), at most `max_tokens` tokens when that is given."""

    free_memory_bytes: int
    free_fraction: float = 0.9  # kv_cache_free_gpu_mem_fraction
    max_tokens: int | None = None  # max_tokens_in_paged_kv_cache


@dataclass(frozen=True)
class KvCachePlan:
    blocks: int
    tokens_per_block: int
    bytes_per_token: int
    source: str  # what decided the size, for the log

    @property
    def tokens(self) -> int:
        return self.blocks * self.tokens_per_block

    @property
    def bytes(self) -> int:
        return self.tokens * self.bytes_per_token


def kv_bytes_per_token(config, dtype_bytes: int) -> int:
    """K and V of every layer for one token: 2 x layers x KV heads x head dim x bytes (a transformers config)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(getattr(text, "num_attention_heads"))
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * dtype_bytes


def plan_kv_cache(budget: KvCacheBudget, *, tokens_per_block: int, bytes_per_token: int, max_batch_size: int,
                  max_seq_len: int) -> KvCachePlan:
    """The cache size from the budget (see the module docstring). Raises KvCacheError below one block."""
    free_memory_bytes, free_fraction, max_tokens = budget.free_memory_bytes, budget.free_fraction, budget.max_tokens
    if not 0 < free_fraction <= 1:
        raise KvCacheError(f"kv_cache_free_gpu_mem_fraction must be in (0, 1], got {free_fraction:g}.")
    by_memory = int(free_fraction * max(0, free_memory_bytes) // bytes_per_token)
    memory_note = (f"{free_fraction:g} x {free_memory_bytes / GIB:.1f} GiB free host memory "
                   f"(kv_cache_free_gpu_mem_fraction) = {by_memory} tokens")
    if max_tokens is not None and max_tokens < by_memory:
        tokens, source = max_tokens, f"max_tokens_in_paged_kv_cache {max_tokens} (below {memory_note})"
    elif max_tokens is not None:
        tokens, source = by_memory, f"{memory_note}, below max_tokens_in_paged_kv_cache {max_tokens}"
    else:
        tokens, source = by_memory, memory_note
    ceiling = max_batch_size * max_seq_len
    if tokens > ceiling:
        tokens, source = ceiling, f"max_batch_size {max_batch_size} x max_seq_len {max_seq_len} (the budget, {source}, is larger)"
    blocks = tokens // tokens_per_block
    if blocks < 1:
        raise KvCacheError(
            f"The KV cache would hold {tokens} tokens, less than one block of {tokens_per_block} ({source}).")
    return KvCachePlan(blocks=blocks, tokens_per_block=tokens_per_block, bytes_per_token=bytes_per_token,
                       source=source)


def blocks_for(tokens: int, tokens_per_block: int) -> int:
    return max(1, math.ceil(tokens / tokens_per_block))


@dataclass
class _Waiting:
    request_id: str
    blocks: int  # worst case: prompt + max_new_tokens


class Admission:
    """Which queued requests may start now. Not thread-safe: the engine holds its lock around every call.

    `queue(id, worst_case_blocks)` adds a request; `ready()` pops and returns the ids that may start
    (and reserves their blocks); `release(id)` gives back a started request's slot and blocks;
    `drop(id)` removes a request that never started."""

    def __init__(self, *, total_blocks: int, max_active: int, policy: SchedulerPolicy = "guaranteed_no_evict",
                 batching: Batching = "inflight") -> None:
        self.total_blocks = total_blocks
        self.max_active = max_active
        self.policy = policy
        self.batching = batching
        self._waiting: deque[_Waiting] = deque()
        self._active: dict[str, int] = {}  # started request -> blocks reserved for it (0 under max_utilization)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def active(self) -> int:
        return len(self._active)

    @property
    def reserved_blocks(self) -> int:
        return sum(self._active.values())

    def fits_at_all(self, blocks: int) -> bool:
        return blocks <= self.total_blocks

    def queue(self, request_id: str, blocks: int) -> None:
        self._waiting.append(_Waiting(request_id, blocks))

    def ready(self) -> list[str]:
        if self.batching == "static" and self._active:
            return []  # V1: the running batch ends before the next one starts
        started: list[str] = []
        while self._waiting and len(self._active) < self.max_active:
            head = self._waiting[0]
            reserve = head.blocks if self.policy == "guaranteed_no_evict" else 0
            if self.reserved_blocks + reserve > self.total_blocks:
                break  # first come, first served: later (smaller) requests do not overtake the head
            self._waiting.popleft()
            self._active[head.request_id] = reserve
            started.append(head.request_id)
        return started

    def release(self, request_id: str) -> None:
        self._active.pop(request_id, None)

    def drop(self, request_id: str) -> bool:
        for item in self._waiting:
            if item.request_id == request_id:
                self._waiting.remove(item)
                return True
        return False

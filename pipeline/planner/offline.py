"""An offline max-load run (`trtllm-bench throughput`) replayed iteration by iteration: a fixed dataset of equal ISL/OSL
requests, all queued at once, served by TensorRT-LLM's scheduler.

Which iterations such a run has depends only on token counts, never on how long an iteration takes, so the schedule is
computed once per run shape and the time model then prices its iterations. What it captures that a steady state does
not: the batch fills only as fast as the token budget admits prompts (max_num_tokens less the decoding sequences; the
PyTorch backend prefills whole prompts, engines chunk them), the last requests drain a batch that no longer refills, and
a run of fewer requests than waves of the batch never reaches steady state at all.

The scheduler as modelled (TensorRT-LLM's capacity scheduler with no eviction, then its micro-batch scheduler,
cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp @0a949d31 MicroBatchScheduler::operator(), which engines and the
PyTorch backend share):
- at most `max_batch` requests are in flight (the runtime's batch limit and what the KV cache holds at ISL+OSL each);
- requests are taken in arrival order, so the decoding ones (one token each) come before the new prompts; without
  chunked prefill a prompt goes whole and the first that does not fit what is left of max_num_tokens ends the iteration;
  with it the prompts share what is left first come, first served, the last one a chunk (not rounded to the chunk unit
  here);
- a request emits its first token in the iteration that finishes its prompt, then one per iteration until OSL.
trtllm-bench itself runs the MAX_UTILIZATION capacity scheduler (it pauses the request started last when the next step's
blocks do not fit): max_utilization_schedule replays a run that way, for builds that ask for it;
scripts/scheduler_policy_check.py compares the two on the published rows and the README says why no-evict stays.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from pipeline.planner.memory import TOKENS_PER_BLOCK

# Iterations are priced in groups whose total token count (decodes + prompt tokens) lies within this ratio of each other:
# an iteration's GEMM, all-reduce and MoE times depend on that count nonlinearly, everything else linearly in the
# group's means.
_GROUP_RATIO = 1.25


@dataclass(frozen=True)
class IterationGroup:
    """`iterations` iterations of the run with these mean loads (as step.StepLoad has them)."""

    iterations: int
    decode: float
    decode_context: float  # mean KV length of the decoding sequences, weighted by sequence
    prefill_tokens: float
    prefill_context: float
    logits_tokens: float


@dataclass(frozen=True)
class OfflineSchedule:
    groups: tuple[IterationGroup, ...]
    output_tokens: int

    @property
    def iterations(self) -> int:
        return sum(group.iterations for group in self.groups)


class _Accumulator:
    def __init__(self) -> None:
        self.sums: dict[int, list[float]] = {}

    def add(self, count: int, decode: float, decode_context: float, prefill: float, prefill_context: float, logits: float) -> None:
        tokens = decode + prefill
        key = round(math.log(tokens) / math.log(_GROUP_RATIO)) if tokens > 0 else -1
        s = self.sums.setdefault(key, [0.0] * 6)
        s[0] += count
        s[1] += count * decode
        s[2] += count * decode * decode_context
        s[3] += count * prefill
        s[4] += count * prefill * prefill_context
        s[5] += count * logits

    def groups(self) -> tuple[IterationGroup, ...]:
        out = []
        for n, decode, decode_kv, prefill, prefill_span, logits in self.sums.values():
            out.append(IterationGroup(int(n), decode / n, decode_kv / decode if decode else 0.0, prefill / n,
                                      prefill_span / prefill if prefill else 0.0, logits / n))
        return tuple(out)


@lru_cache(maxsize=4096)
def offline_schedule(isl: int, osl: int, requests: int, max_batch: int, max_num_tokens: int, chunked: bool) -> OfflineSchedule:
    """The iterations of a run of `requests` requests of `isl` prompt and `osl` output tokens, at most `max_batch` in
    flight and `max_num_tokens` per iteration, prompts chunked or whole."""
    max_batch = max(1, max_batch)
    queued = requests
    # decoding cohorts: [requests, iteration of their prompt]; they decode in the osl - 1 iterations after it
    decoding: deque[list[int]] = deque()
    decoding_count = 0
    decoding_start_sum = 0  # sum over decoding requests of their prompt's iteration (their mean KV length follows)
    partial: list[int] | None = None  # [tokens of the prompt being chunked still to go]
    acc = _Accumulator()
    iteration = output = 0

    while queued or decoding or partial:
        budget = max_num_tokens - decoding_count
        in_flight = decoding_count + (1 if partial else 0)
        prefill = finished = 0
        span = 0.0
        if partial and budget > 0:
            step = min(partial[0], budget)
            span += step * (isl - partial[0] + step / 2)
            prefill += step
            budget -= step
            partial[0] -= step
            if partial[0] == 0:
                partial, finished = None, 1
        room = max_batch - in_flight
        whole = min(queued, room, max(0, budget) // isl)
        if not whole and not decoding_count and not partial and queued and room > 0 and not chunked:
            whole = 1  # a prompt longer than the budget still runs alone (the limits say it fits)
        if whole:
            prefill += whole * isl
            span += whole * isl * isl / 2
            budget -= whole * isl
            queued -= whole
            finished += whole
            room -= whole
        if chunked and queued and room > 0 and budget > 0 and partial is None:
            partial = [isl - budget]
            span += budget * budget / 2
            prefill += budget
            queued -= 1

        # Nothing admitted: the batch, and so the budget and the room, stay as they are until the oldest cohort
        # finishes, so those iterations differ only in KV length and are taken at once.
        count = 1 if prefill or not decoding else decoding[0][1] + osl - iteration
        mean_context = isl + (iteration + (count - 1) / 2) - decoding_start_sum / decoding_count if decoding_count else 0.0
        acc.add(count, decoding_count, mean_context, prefill, span / prefill if prefill else 0.0, decoding_count + finished)
        output += count * decoding_count + finished
        iteration += count

        while decoding and decoding[0][1] + osl - 1 < iteration:
            done = decoding.popleft()
            decoding_count -= done[0]
            decoding_start_sum -= done[0] * done[1]
        if finished and osl > 1:
            decoding.append([finished, iteration - 1])
            decoding_count += finished
            decoding_start_sum += finished * (iteration - 1)
    return OfflineSchedule(acc.groups(), output)


@dataclass(frozen=True)
class RunLimits:
    """What bounds a run's iterations under MAX_UTILIZATION: requests in flight (the runtime's batch limit), tokens per
    iteration, prompts chunked (engines) or whole (the PyTorch backend), and the KV cache's size in tokens."""

    max_batch: int
    max_num_tokens: int
    chunked: bool
    capacity_tokens: int


@lru_cache(maxsize=4096)
def max_utilization_schedule(isl: int, osl: int, requests: int, limits: RunLimits) -> OfflineSchedule:
    """The iterations of the same run under the MAX_UTILIZATION capacity scheduler that trtllm-bench runs: a request is
    admitted while the blocks of its whole prompt fit (KVCacheManager::getNeededBlocksOneStep takes them with its first
    chunk; blocks of memory.TOKENS_PER_BLOCK), whatever it will need later, so up to max_batch run at once; when the cache
    cannot hold every running request's next token, the requests started last are paused and, their generated tokens lost
    (a max_input_len no longer than the prompt), go back to the queue to start over (capacityScheduler.cpp
    MaxUtilizationScheduler, LlmRequest::pause; scripts/scheduler_policy_check.py follows every request the same way).
    output_tokens counts only the tokens of requests that finish."""
    max_batch, max_num_tokens = max(1, limits.max_batch), limits.max_num_tokens
    capacity_blocks = limits.capacity_tokens // TOKENS_PER_BLOCK

    def blocks(tokens: float) -> int:
        return -(-int(tokens) // TOKENS_PER_BLOCK)

    if requests and blocks(isl + 1) > capacity_blocks:
        raise ValueError(f"a KV cache of {limits.capacity_tokens} tokens cannot hold one {isl}-token prompt and its first "
                         "decode: no run to replay")

    queued = requests
    cohorts: list[list[int]] = []  # [requests, iteration of their prompt], oldest first; KV at iteration t: isl + t - start
    partial: list[int] | None = None  # [prompt tokens prefilled so far] of the one prompt being chunked
    acc = _Accumulator()
    iteration = output = 0

    def held(at: int) -> int:  # blocks the decoding requests hold once iteration `at` has run
        return sum(n * blocks(isl + at - start) for n, start in cohorts)

    while queued or cohorts or partial:
        decoding = sum(n for n, _ in cohorts)
        budget = max_num_tokens - decoding
        free = capacity_blocks - held(iteration) - (blocks(isl) if partial else 0)
        prefill = finished = 0
        span = 0.0
        pausing = free < 0  # the blocks a pause frees may admit a prompt in the next iteration: that one is not skipped
        if pausing:  # pause from the youngest: the prompt being chunked first, then the cohorts started last
            if partial:
                free += blocks(isl)
                partial, queued = None, queued + 1
            while free < 0:
                n, start = cohorts[-1]
                per_request = blocks(isl + iteration - start)
                paused = min(n, -(-(-free) // per_request))
                output -= paused * (iteration - start)  # the tokens they had emitted are generated again
                queued += paused
                free += paused * per_request
                if paused == n:
                    cohorts.pop()
                else:
                    cohorts[-1][0] -= paused
            decoding = sum(n for n, _ in cohorts)
        else:
            if partial and budget > 0:  # its blocks were taken whole with its first chunk
                step = min(isl - partial[0], budget)
                span += step * (partial[0] + step / 2)
                prefill, budget = prefill + step, budget - step
                partial[0] += step
                if partial[0] == isl:
                    partial, finished = None, 1
            room = max_batch - decoding - finished - (1 if partial else 0)
            whole = min(queued, max(0, room), max(0, budget) // isl, max(0, free) // blocks(isl))
            if not limits.chunked and not (whole or decoding or finished) and queued and room > 0 and blocks(isl) <= free:
                whole = 1  # a prompt longer than the budget still runs alone
            if whole:
                prefill, span = prefill + whole * isl, span + whole * isl * isl / 2
                budget, queued, finished, room = budget - whole * isl, queued - whole, finished + whole, room - whole
                free -= whole * blocks(isl)
            if limits.chunked and queued and room > 0 and 0 < budget and partial is None and blocks(isl) <= free:
                partial, queued = [budget], queued - 1
                span, prefill = span + budget * budget / 2, prefill + budget

        count = 1
        if not prefill and cohorts and not pausing:  # decode only until the oldest cohort finishes or the cache overflows
            count = cohorts[0][1] + osl - iteration
            room_left = capacity_blocks - (blocks(isl) if partial else 0)
            low, high = iteration + 1, iteration + count  # the first later iteration whose tokens do not fit
            while low < high:
                mid = (low + high) // 2
                low, high = (mid + 1, high) if held(mid) <= room_left else (low, mid)
            count = max(1, low - iteration)
        starts = sum(n * start for n, start in cohorts)
        mean_context = isl + (iteration + (count - 1) / 2) - starts / decoding if decoding else 0.0
        acc.add(count, decoding, mean_context, prefill, span / prefill if prefill else 0.0, decoding + finished)
        output += count * decoding + finished
        iteration += count
        while cohorts and cohorts[0][1] + osl - 1 < iteration:
            cohorts.pop(0)
        if finished and osl > 1:
            cohorts.append([finished, iteration - 1])
    return OfflineSchedule(acc.groups(), output)

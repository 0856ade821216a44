"""TTFT, TPOT and throughput, all from one iteration model (planner.step): a closed loop of clients (predict), a prompt
alone (prefill_time), an offline max-load run as the scheduler serves it (max_throughput).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.planner.memory import MemoryPlan, fitting_memory, weight_bytes_read_per_step
from pipeline.planner.offline import RunLimits, max_utilization_schedule, offline_schedule
from pipeline.planner.rates import EFFICIENCY, Efficiency, hbm_bandwidth
from pipeline.planner.recommend import recommend
from pipeline.planner.scenario import Scenario
from pipeline.planner.step import (StepLoad, StepTime, StepWork, gemm_roofline_s, iteration_mix, step_time, step_work,
                                   weighted_mean)


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


def _sustainable_batch(memory: MemoryPlan, build: dict[str, Any], scenario: Scenario) -> int:
    """Sequences one batch keeps in flight: KV capacity (no-evict scheduling reserves ISL+OSL), max_batch_size (and the
    dynamic tuner's pick when the build asks for it), and the max_num_tokens budget for decode tokens plus their prefill
    share."""
    token_budget = build["max_num_tokens"] / (1 + scenario.isl / scenario.osl)
    return max(1, int(min(_in_flight_limit(memory, build), max(1, token_budget))))


def runtime_batch_size(memory: MemoryPlan, build: dict[str, Any]) -> int:
    """The runtime's batch limit: max_batch_size, and the dynamic tuner's pick when the build asks for it."""
    limit = build["max_batch_size"]
    if build.get("dynamic_batch_size"):
        limit = min(limit, tuned_batch_size(memory.max_sequences))
    return limit


def _in_flight_limit(memory: MemoryPlan, build: dict[str, Any]) -> int:
    """Requests one batch holds at once under no-evict admission: its batch limit and its share of what the KV cache
    holds at ISL+OSL each (pipeline stages: the micro-batches in flight share every stage's cache)."""
    return max(1, min(memory.sequences_per_micro_batch, runtime_batch_size(memory, build)))


def predict(
    scenario: Scenario, concurrency: int, *, build: dict[str, Any] | None = None, efficiency: Efficiency | None = None,
) -> Prediction:
    """TTFT, TPOT and output tokens/s for a closed loop of `concurrency` clients (each sends its next
    request when the last one finishes), on an engine built with `build` (default: recommend_build
    for throughput). With attention data parallelism the clients are spread evenly over the GPUs, each scheduling its
    share within the build's limits; with pipeline stages, over the micro-batches in flight."""
    scenario.check()
    osl = scenario.osl
    eff = efficiency or EFFICIENCY
    if concurrency < 1:
        raise InvalidInputError("Concurrency must be at least 1.", hint="e.g. --concurrency 8")
    build = build or recommend(scenario, "throughput")
    clients = concurrency / scenario.lanes  # per batch scheduled apart
    run = closed_loop_run(scenario, concurrency, build)
    batch = run.batch
    prefill_s = prefill_time(scenario, build["max_num_tokens"], eff)
    step = run.mean_step(eff).total_s
    ttft = prefill_s
    if batch > 1:
        ttft += step / 2  # a new request waits on average half an iteration to join the batch
        ttft += prefill_wait_s(prefill_s, batch - 1, step / 2 + (osl - 1) * step)
    latency = ttft + (osl - 1) * step
    throughput = batch * osl / latency
    if clients > batch:  # the rest queue (Little's law): each waits for clients - batch requests to finish
        ttft += (clients - batch) / (throughput / osl)
        latency = ttft + (osl - 1) * step
    return Prediction(
        concurrency=concurrency,
        batch=int(batch * scenario.lanes),
        ttft_ms=round(ttft * 1e3, 3),
        tpot_ms=round(step * 1e3, 3),
        output_tokens_per_s=round(throughput * scenario.lanes, 2),
        output_tokens_per_s_per_user=round(osl / latency, 3),
        request_latency_s=round(latency, 4),
    )


def closed_loop_run(scenario: Scenario, concurrency: int, build: dict[str, Any]) -> ThroughputRun:
    """What `concurrency` clients keep one batch doing (predict's layout, which the fitted constants do not enter): its
    sequences in flight (`batch`, possibly fractional: the clients spread over the batches scheduled apart) and its
    iterations, every mean iteration one token for each of them (the run's mean step is their TPOT). Other clients'
    prompts are prefilled inside the decode steps: (batch - 1)/osl of them per step, in chunks."""
    memory = fitting_memory(scenario, build)
    batch = min(concurrency / scenario.lanes, _sustainable_batch(memory, build, scenario))
    mix = iteration_mix(scenario, batch, (batch - 1) * scenario.isl / scenario.osl, build)
    return ThroughputRun(scenario, batch, mix, output_tokens=batch, iterations=1)


def prefill_wait_s(prefill_s: float, others: float, rest_s: float) -> float:
    """Mean wait of a prompt behind other clients' prompts still in their prefill. The scheduler gives context tokens to
    the requests in arrival order, so prompts go through the prefill one after another; the `others` clients send theirs
    once per cycle (its prefill, its wait, then `rest_s`: joining the batch and decoding). The M/D/1 queue's mean wait,
    rho x prefill / 2(1 - rho), at the rate that wait leaves the closed loop: the root of a decreasing map, bisected."""
    if others <= 0 or prefill_s <= 0:
        return 0.0

    def excess(wait: float) -> float:  # the wait guessed minus the wait it implies
        rho = others * prefill_s / (prefill_s + wait + rest_s)
        return wait - rho * prefill_s / (2 * (1 - rho)) if rho < 1 else -math.inf

    low, high = 0.0, others * prefill_s  # every other prompt ahead: rho < 1 there, and the wait it implies is less
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) < 0 else (low, middle)
    return high


class ThroughputEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    batch: int
    step_ms: float
    output_tokens_per_s: float
    bound: str  # what dominates an iteration
    phases_ms: dict[str, float]


@dataclass(frozen=True)
class ThroughputRun:
    """An offline max-load run laid out as the scheduler serves it: one GPU's batch, its iterations as (share, load)
    pairs, and its output tokens over that many iterations (steady state: one mean iteration's batch). Nothing here
    depends on the fitted constants; each iteration's work is laid out once per structure of them (planner.step). A
    closed loop's (closed_loop_run) batch may be fractional: its clients spread over the batches scheduled apart."""

    scenario: Scenario
    batch: float
    mix: list[tuple[float, StepLoad]]
    output_tokens: float
    iterations: float
    _works: dict[tuple[bool, ...], list[tuple[float, StepWork]]] = field(default_factory=dict, compare=False, repr=False)

    def mean_step(self, eff: Efficiency) -> StepTime:
        works = self._works.get(eff.structure)
        if works is None:
            works = self._works[eff.structure] = [(w, step_work(self.scenario, load, eff)) for w, load in self.mix if w > 0]
        return weighted_mean([(w, work.time(eff)) for w, work in works])

    def tokens_per_s(self, step: StepTime) -> float:
        """All GPUs' output tokens/s, given the run's mean iteration."""
        return self.output_tokens / (step.total_s * self.iterations) * self.scenario.lanes


def throughput_run(scenario: Scenario, build: dict[str, Any], requests: int | None = None) -> ThroughputRun:
    """The run max_throughput times: the batch the KV cache and build limits allow, each iteration carrying its share of
    prefill; for `requests` requests given at once, replayed iteration by iteration (planner/offline.py)."""
    scenario.check()
    memory = fitting_memory(scenario, build)
    batch = _sustainable_batch(memory, build, scenario)
    if requests is None:
        return ThroughputRun(scenario, batch, iteration_mix(scenario, batch, batch * scenario.isl / scenario.osl, build),
                             output_tokens=batch, iterations=1)
    requests = max(1, -(-requests // scenario.lanes))  # one batch's share
    if build.get("capacity_scheduler_policy") == "max_utilization":
        run = max_utilization_schedule(scenario.isl, scenario.osl, requests, RunLimits(
            runtime_batch_size(memory, build), build["max_num_tokens"], build.get("chunked_prefill", True),
            memory.kv_tokens_per_micro_batch))
    else:
        run = offline_schedule(scenario.isl, scenario.osl, requests, _in_flight_limit(memory, build),
                               build["max_num_tokens"], build.get("chunked_prefill", True))
    mix = [(group.iterations / run.iterations, StepLoad(group.decode, group.decode_context, group.prefill_tokens,
                                                        group.prefill_context, group.logits_tokens)) for group in run.groups]
    return ThroughputRun(scenario, min(batch, requests), mix, run.output_tokens, run.iterations)


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
    parallelism each GPU schedules its share of the requests alone, in step with the others, and with pipeline stages each
    micro-batch its share; the batch is all of them together."""
    scenario.check()  # before recommend, which assumes a scenario it can plan
    run = throughput_run(scenario, build or recommend(scenario, "throughput"), requests)
    return throughput_estimate(run, efficiency or EFFICIENCY)


def throughput_estimate(run: ThroughputRun, eff: Efficiency) -> ThroughputEstimate:
    """max_throughput's answer for a run already laid out."""
    scenario, batch, lanes = run.scenario, run.batch, run.scenario.lanes
    stage, gpu, quant, tp = scenario.stage, scenario.gpu, scenario.quant, scenario.tp
    step = run.mean_step(eff)
    tokens_per_s = run.tokens_per_s(step)
    phases = {
        "gemm": step.gemm_s, "decode_attention": step.decode_attention_s,
        "context_attention": step.context_attention_s, "allreduce": step.allreduce_s, "overhead": step.overhead_s,
    }
    if scenario.pp > 1:
        phases["pipeline_send"] = step.send_s
    expert_tokens = batch * scenario.ranks  # one micro-batch's, on every attention-DP rank
    read_s = (scenario.pp * weight_bytes_read_per_step(stage.model, quant, tp, expert_tokens, attention_dp=scenario.attention_dp)
              / (hbm_bandwidth(gpu) * eff.bandwidth))
    gemm_bound = "weight reads" if gemm_roofline_s(read_s, read_s, eff.gemm_roofline_exponent) >= step.gemm_s else "GEMM compute"
    dominant = max(phases, key=phases.get)
    bound = gemm_bound if dominant == "gemm" else {
        "decode_attention": "KV reads", "context_attention": "context attention",
        "allreduce": "expert all-gather" if scenario.attention_dp else "TP all-reduce", "overhead": "step overhead",
        "pipeline_send": "stage hand-overs",
    }[dominant]
    return ThroughputEstimate(
        batch=batch * lanes,
        step_ms=round(step.total_s * 1e3, 3),
        output_tokens_per_s=round(tokens_per_s, 2),
        bound=bound,
        phases_ms={k: round(v * 1e3, 3) for k, v in phases.items()},
    )


#!/usr/bin/env python
"""How much it matters that the planner replays a trtllm-bench run with no-evict admission while trtllm-bench itself runs
TensorRT-LLM's MAX_UTILIZATION capacity scheduler.

    .venv/bin/python scripts/scheduler_policy_check.py [--model llama-3.1-70b] [--gpu h100-sxm] [--tp 4] [--shape 128/4096 ...]
    .venv/bin/python scripts/scheduler_policy_check.py --cv tensorrt|pytorch

What trtllm-bench runs (NVIDIA/TensorRT-LLM@000a01de tensorrt_llm/bench/dataclasses/configuration.py,
ExecutorSettingsConfig.scheduler_policy = MAX_UTILIZATION, with the dynamic batch-size tuner on): every iteration the
capacity scheduler takes the requests in order, oldest first, while the blocks their step adds fit (a prompt's first
chunk takes its whole prompt's, KVCacheManager::getNeededBlocksOneStep); when one does not fit, it pauses the request
started last and tries again (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp MaxUtilizationScheduler::operator()).
A paused request frees its KV cache and is prefilled again later, its generated tokens moved into its prompt up to
max_input_len (LlmRequest::pause: newPromptLen = min(maxInputLen, promptLen + generated)). So there are two readings:
the tokens kept (max_input_len leaves room: only the prefill is redone) or lost (max_input_len is the prompt's length:
they are generated again).

planner/offline.py's offline_schedule admits a request only when the KV cache holds its whole ISL+OSL (no pausing); its
max_utilization_schedule replays the tokens-lost reading in groups. This script follows every request one iteration at a
time (replay_max_utilization: both readings; tests/unit/planner/test_scheduler_policy_check.py holds the grouped replay
to it), prices every replay with the same step-time model and constants, and prints them beside the published figure;
--cv refits and cross-validates one backend's rows under each policy as `make plan-check` does (the PyTorch backend's
whole prompts only in groups). The rows compared one by one are engine rows (chunked prefill, memory.TOKENS_PER_BLOCK-token
blocks).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.planner import published as P  # noqa: E402
from pipeline.planner.memory import TOKENS_PER_BLOCK, fitting_memory  # noqa: E402
from pipeline.planner.rates import Efficiency, efficiency_for  # noqa: E402
from pipeline.planner.scenario import Scenario  # noqa: E402
from pipeline.planner.step import StepLoad, step_time  # noqa: E402
from pipeline.planner.timing import max_throughput, runtime_batch_size  # noqa: E402

@dataclass
class Request:
    prompt: int  # tokens to prefill (ISL, or more after a pause that kept its tokens)
    prefilled: int = 0
    kept: int = 0  # output tokens moved into the prompt by a pause (already counted as output)
    generated: int = 0  # output tokens since the last (re)start

    def held_blocks(self) -> int:
        """Blocks this request holds: none before its first chunk, then its whole prompt's, then one more per block of
        output."""
        if self.prefilled == 0:
            return 0
        if self.prefilled < self.prompt:
            return math.ceil(self.prompt / TOKENS_PER_BLOCK)
        return math.ceil((self.prompt + self.generated - 1) / TOKENS_PER_BLOCK)  # the last token is not written yet

    def blocks_after_step(self) -> int:
        """Blocks it holds once this step has run: a prompt's first chunk takes the whole prompt's
        (KVCacheManager::getNeededBlocksOneStep); a decoding step writes the last token generated."""
        if self.prefilled < self.prompt:
            return math.ceil(self.prompt / TOKENS_PER_BLOCK)
        return math.ceil((self.prompt + self.generated) / TOKENS_PER_BLOCK)


@dataclass(frozen=True)
class Replay:
    tokens_per_s: float
    paused: int  # pauses over the run
    lost_tokens: int  # output tokens generated and then thrown away by a pause (restart only)


def _pause(victim: Request, keep: bool) -> int:
    lost = 0 if keep else victim.generated
    if keep:
        victim.prompt += victim.generated
        victim.kept += victim.generated
    victim.prefilled = victim.generated = 0
    return lost


def replay_max_utilization(scenario: Scenario, build: dict, efficiency: Efficiency, requests: int, keep: bool) -> Replay:
    """Seconds and tokens of `requests` equal requests served as MAX_UTILIZATION serves them (see the module docstring)."""
    osl, max_num_tokens = scenario.osl, build["max_num_tokens"]
    memory = fitting_memory(scenario, build)
    capacity_blocks = memory.kv_capacity_tokens // TOKENS_PER_BLOCK
    runtime_batch = runtime_batch_size(memory, build)
    waiting = [Request(scenario.isl) for _ in range(requests)]
    active: list[Request] = []
    seconds, output, paused, lost = 0.0, 0, 0, 0
    while waiting or active:
        candidates = active + waiting[:max(0, runtime_batch - len(active))]
        scheduled: list[Request] = []
        # the pool as the scheduler sees it: every started request holds its blocks; scheduling one takes the blocks
        # its step adds, pausing one gives back what it holds
        free = capacity_blocks - sum(r.held_blocks() for r in active)
        i = 0
        while i < len(candidates):
            request = candidates[i]
            added = request.blocks_after_step() - request.held_blocks()
            if len(scheduled) < runtime_batch and added <= free:
                scheduled.append(request)
                free -= added
                i += 1
                continue
            started = [j for j in range(len(candidates) - 1, i - 1, -1) if candidates[j].prefilled > 0]
            if not started:
                break
            victim = candidates[started[0]]
            free += victim.held_blocks()
            del candidates[started[0]:]  # the scheduler's end moves to the paused request: nothing after it is tried
            paused += 1
            lost += _pause(victim, keep)
            (active if victim in active else waiting).remove(victim)
            waiting.insert(0, victim)
        decoding = [r for r in scheduled if r.prefilled >= r.prompt]
        budget = max_num_tokens - len(decoding)
        prefill, span, finished = 0, 0.0, []
        for request in (r for r in scheduled if r.prefilled < r.prompt):
            if budget <= 0:
                break
            chunk = min(request.prompt - request.prefilled, budget)
            span += chunk * (request.prefilled + chunk / 2)
            prefill, budget = prefill + chunk, budget - chunk
            request.prefilled += chunk
            if request.prefilled >= request.prompt:
                finished.append(request)
            if request in waiting:
                waiting.remove(request)
                active.append(request)
        context = sum(r.prompt + r.generated for r in decoding) / len(decoding) if decoding else 0.0
        load = StepLoad(len(decoding), context, prefill, span / prefill if prefill else 0.0, len(decoding) + len(finished))
        seconds += step_time(scenario, load, efficiency).total_s
        for request in decoding + finished:
            request.generated += 1
        for request in [r for r in active if r.kept + r.generated >= osl]:
            active.remove(request)
            output += osl
    return Replay(output / seconds, paused, lost)


def _max_utilization_limits(limits):
    """trtllm_bench_limits with every run asking for MAX_UTILIZATION (for --cv)."""
    def limits_under_max_utilization(scenario: Scenario, backend: str = "tensorrt", *rest) -> dict:
        return {**limits(scenario, backend, *rest), "capacity_scheduler_policy": "max_utilization"}
    return limits_under_max_utilization


def cross_validation(backend: str, policy: str) -> dict:
    """scripts/plan_vs_published.py's fit and cross-validation of one backend's rows with every run replayed under
    `policy`."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from plan_vs_published import cross_validate, cross_validated_error, fit

    original = P.trtllm_bench_limits
    if policy == "max_utilization":  # published.trtllm_bench_throughput, which the fit calls, looks the name up there
        P.trtllm_bench_limits = _max_utilization_limits(original)
    try:
        rows = P.published_rows(backend)
        efficiency = fit(rows)
        result = {"in sample": P.error_summary(P.compare_published(None, rows, efficiency=efficiency))}
        for by in ("gpu", "model"):
            result[f"{by} held out"] = cross_validated_error(cross_validate(rows, by))
        return result
    finally:
        P.trtllm_bench_limits = original


def row_report(row: dict, efficiency: Efficiency) -> str:
    scenario = P.published_scenario(P.published_model(row["model"]), row)
    build = P.trtllm_bench_limits(scenario, "tensorrt")
    requests = P.bench_requests(row["trtllm_version"], int(row["isl"]), int(row["osl"]))
    published = float(row["tokens_per_s"])

    def versus(value: float) -> str:
        return f"{value:.0f} ({100 * (value / published - 1):+.1f}%)"

    no_evict = max_throughput(scenario, build=build, efficiency=efficiency, requests=requests).output_tokens_per_s
    restart = max_throughput(scenario, build={**build, "capacity_scheduler_policy": "max_utilization"},
                             efficiency=efficiency, requests=requests).output_tokens_per_s
    keep = replay_max_utilization(scenario, build, efficiency, requests, keep=True)
    return (f"{row['model']} {row['gpu']} TP{row['tp']} {row['isl']}/{row['osl']} ({requests} requests): published "
            f"{published:.0f}; no-evict {versus(no_evict)}; MAX_UTILIZATION, tokens lost {versus(restart)}, tokens kept "
            f"{versus(keep.tokens_per_s)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--gpu", default="h100-sxm")
    parser.add_argument("--tp", default="4")
    parser.add_argument("--shape", nargs="*", default=None, help="ISL/OSL pairs (default: every published one)")
    parser.add_argument("--cv", choices=["tensorrt", "pytorch"], default=None, help="refit and cross-validate that "
                        "backend's rows under each policy (tokens lost), as make plan-check does (~5 minutes each)")
    args = parser.parse_args(argv)
    if args.cv:
        for policy in ("guaranteed_no_evict", "max_utilization"):
            for name, figures in cross_validation(args.cv, policy).items():
                print(f"{args.cv} {policy:20s} {name:15s} median |error| {figures['median_abs_pct_error']:4.1f}%, worst "
                      f"{figures['max_abs_pct_error']:4.1f}% over {figures['rows']} rows", flush=True)
        return 0
    rows = [r for r in P.published_rows("tensorrt") if (r["model"], r["gpu"], r["tp"]) == (args.model, args.gpu, args.tp)
            and (not args.shape or f"{r['isl']}/{r['osl']}" in args.shape)]
    if not rows:
        print(f"no published engine row for {args.model} on {args.gpu} at TP {args.tp}", file=sys.stderr)
        return 2
    for row in rows:
        print(row_report(row, efficiency_for("tensorrt")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""How much it matters that the planner replays a trtllm-bench run with no-evict admission while trtllm-bench itself runs
TensorRT-LLM's MAX_UTILIZATION capacity scheduler.

    .venv/bin/python scripts/scheduler_policy_check.py [--model llama-3.1-70b] [--gpu h100-sxm] [--tp 4] [--shape 128/4096 ...]

What trtllm-bench runs (NVIDIA/TensorRT-LLM@000a01de tensorrt_llm/bench/dataclasses/configuration.py,
ExecutorSettingsConfig.scheduler_policy = MAX_UTILIZATION, with the dynamic batch-size tuner on): every iteration the
capacity scheduler takes the requests in order, oldest first, while the blocks their next step needs fit; when one does
not fit, it pauses the request started last and tries again (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp
MaxUtilizationScheduler::operator()). A paused request frees its KV cache and is prefilled again later, its generated
tokens moved into its prompt up to max_input_len (LlmRequest::pause: newPromptLen = min(maxInputLen, promptLen +
generated)). So there are two readings, replayed here as `keep` (max_input_len leaves room: only the prefill is redone)
and `restart` (max_input_len is the ISL: the generated tokens are lost and generated again).

planner/offline.py instead admits a request only when the KV cache holds its whole ISL+OSL (no pausing). This script
replays the same run request by request under MAX_UTILIZATION, priced by the same step-time model and constants, and
prints the three beside the published figure. Engine rows only (chunked prefill, 64-token blocks).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.planner import published as P  # noqa: E402
from pipeline.planner.memory import fitting_memory  # noqa: E402
from pipeline.planner.rates import Efficiency, efficiency_for  # noqa: E402
from pipeline.planner.scenario import Scenario  # noqa: E402
from pipeline.planner.timing import StepLoad, step_time, tuned_batch_size  # noqa: E402

ENGINE_BLOCK_TOKENS = 64


@dataclass
class Request:
    prompt: int  # tokens to prefill (ISL, or more after a pause that kept its tokens)
    prefilled: int = 0
    kept: int = 0  # output tokens moved into the prompt by a pause (already counted as output)
    generated: int = 0  # output tokens since the last (re)start

    def kv_after_step(self, max_num_tokens: int) -> int:
        if self.prefilled >= self.prompt:
            return self.prompt + self.generated + 1
        return min(self.prompt, self.prefilled + max_num_tokens)


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
    capacity_blocks = memory.kv_capacity_tokens // ENGINE_BLOCK_TOKENS
    runtime_batch = min(build["max_batch_size"], tuned_batch_size(memory.max_sequences))
    waiting = [Request(scenario.isl) for _ in range(requests)]
    active: list[Request] = []
    seconds, output, paused, lost = 0.0, 0, 0, 0
    while waiting or active:
        candidates = active + waiting[:max(0, runtime_batch - len(active))]
        scheduled: list[Request] = []
        used, i = 0, 0
        while i < len(candidates):
            need = math.ceil(candidates[i].kv_after_step(max_num_tokens) / ENGINE_BLOCK_TOKENS)
            if len(scheduled) < runtime_batch and used + need <= capacity_blocks:
                scheduled.append(candidates[i])
                used += need
                i += 1
                continue
            started = [j for j in range(len(candidates) - 1, i, -1) if candidates[j].prefilled > 0]
            if not started:
                break
            victim = candidates[started[0]]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3.1-70b")
    parser.add_argument("--gpu", default="h100-sxm")
    parser.add_argument("--tp", default="4")
    parser.add_argument("--shape", nargs="*", default=None, help="ISL/OSL pairs (default: every published one)")
    args = parser.parse_args(argv)
    efficiency, spec = efficiency_for("tensorrt"), P.published_model(args.model)
    rows = [r for r in P.published_rows("tensorrt") if (r["model"], r["gpu"], r["tp"]) == (args.model, args.gpu, args.tp)
            and (not args.shape or f"{r['isl']}/{r['osl']}" in args.shape)]
    if not rows:
        print(f"no published engine row for {args.model} on {args.gpu} at TP {args.tp}", file=sys.stderr)
        return 2
    for row in rows:
        scenario = P.published_scenario(spec, row)
        build = P.trtllm_bench_limits(scenario, "tensorrt")
        requests = P.bench_requests(row["trtllm_version"], int(row["isl"]), int(row["osl"]))
        published = float(row["tokens_per_s"])
        no_evict = P.trtllm_bench_throughput(scenario, efficiency=efficiency, requests=requests).output_tokens_per_s
        parts = [f"no-evict {no_evict:.0f} ({100 * (no_evict / published - 1):+.1f}%)"]
        for keep in (True, False):
            replay = replay_max_utilization(scenario, build, efficiency, requests, keep)
            parts.append(f"MAX_UTILIZATION {'keep' if keep else 'restart'} {replay.tokens_per_s:.0f} "
                         f"({100 * (replay.tokens_per_s / published - 1):+.1f}%, {replay.paused} pauses)")
        print(f"{args.model} {args.gpu} TP{args.tp} {row['isl']}/{row['osl']} ({requests} requests): published "
              f"{published:.0f}; " + "; ".join(parts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

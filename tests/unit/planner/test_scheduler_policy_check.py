"""scripts/scheduler_policy_check.py: a trtllm-bench run replayed request by request under MAX_UTILIZATION, against the
planner's no-evict replay and its grouped MAX_UTILIZATION replay (planner/offline.py), priced by the same step-time model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pipeline.planner.published import published_model, published_scenario, trtllm_bench_limits
from pipeline.planner.offline import RunLimits, max_utilization_schedule, offline_schedule
from pipeline.planner.rates import efficiency_for
from pipeline.planner.timing import max_throughput

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "scheduler_policy_check.py"


def _script():
    spec = importlib.util.spec_from_file_location("scheduler_policy_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _scenario(isl: int, osl: int):
    row = {"gpu": "h100-sxm", "precision": "FP8", "tp": "1", "isl": str(isl), "osl": str(osl)}
    return published_scenario(published_model("llama-3.1-70b"), row)


def _build(scenario, max_batch_size: int) -> dict:
    return {**trtllm_bench_limits(scenario), "max_batch_size": max_batch_size, "max_num_tokens": 2048}


def test_where_the_cache_holds_every_request_whole_the_two_policies_agree() -> None:
    """A batch limit the KV cache holds at ISL+OSL: nothing is paused, and the two independent replays agree."""
    script, eff = _script(), efficiency_for("tensorrt")
    scenario = _scenario(128, 512)
    build = _build(scenario, 8)
    replay = script.replay_max_utilization(scenario, build, eff, 40, keep=False)
    assert replay.paused == 0 and replay.lost_tokens == 0
    no_evict = max_throughput(scenario, build=build, efficiency=eff, requests=40).output_tokens_per_s
    assert replay.tokens_per_s == pytest.approx(no_evict, rel=0.03)


def test_a_batch_beyond_the_cache_pauses_and_restarting_loses_the_tokens() -> None:
    """70B FP8 on one H100 holds ~15 sequences of 128+4096 tokens: a 64-request batch fills the cache and pauses; if the
    paused requests keep their tokens the run is faster than if they restart (the published figure, 426 tokens/s, sides
    with restarting or with no-evict: keeping them comes out ~70% fast)."""
    script, eff = _script(), efficiency_for("tensorrt")
    scenario = _scenario(128, 4096)
    build = _build(scenario, 64)
    keep = script.replay_max_utilization(scenario, build, eff, 64, keep=True)
    restart = script.replay_max_utilization(scenario, build, eff, 64, keep=False)
    assert keep.paused > 0 and restart.paused > 0
    assert keep.lost_tokens == 0 < restart.lost_tokens
    assert keep.tokens_per_s > 1.3 * restart.tokens_per_s


@pytest.mark.parametrize(("isl", "osl", "requests", "max_batch_size"), [
    (128, 4096, 60, 64),  # 15 sequences fit whole: the cache fills late and pauses, requests restart
    (2048, 512, 40, 32),  # prompts of a whole max_num_tokens, chunked beside the decodes
    (500, 2000, 120, 64),
])
def test_the_grouped_replay_is_the_request_by_request_one(isl: int, osl: int, requests: int, max_batch_size: int) -> None:
    """offline.max_utilization_schedule, which groups iterations, serves every request as the script's replay that
    follows each one does (tokens lost): the same throughput."""
    script, eff = _script(), efficiency_for("tensorrt")
    scenario = _scenario(isl, osl)
    build = _build(scenario, max_batch_size)
    one_by_one = script.replay_max_utilization(scenario, build, eff, requests, keep=False)
    assert one_by_one.paused > 0
    grouped = max_throughput(scenario, build={**build, "capacity_scheduler_policy": "max_utilization"}, efficiency=eff,
                             requests=requests)
    assert grouped.output_tokens_per_s == pytest.approx(one_by_one.tokens_per_s, rel=0.002)
    no_evict = max_throughput(scenario, build=build, efficiency=eff, requests=requests)
    assert grouped.output_tokens_per_s != pytest.approx(no_evict.output_tokens_per_s, rel=0.002)  # the policy is used


def test_whole_prompts_that_the_cache_holds_are_scheduled_as_no_evict_schedules_them() -> None:
    """The PyTorch backend's whole prompts (no chunking): with a cache that holds every request whole nothing is paused,
    and the grouped MAX_UTILIZATION replay has the no-evict replay's iterations."""
    capacity = (1000 + 300) * 16 * 4  # four times what 16 requests need
    under_max_utilization = max_utilization_schedule(1000, 300, 50, RunLimits(16, 4096, False, capacity))
    assert under_max_utilization == offline_schedule(1000, 300, 50, 16, 4096, False)
    assert under_max_utilization.output_tokens == 50 * 300


def test_a_cache_that_holds_no_prompt_is_refused_not_replayed_forever() -> None:
    with pytest.raises(ValueError, match="cannot hold one 1000-token prompt"):
        max_utilization_schedule(1000, 300, 5, RunLimits(16, 4096, False, 512))

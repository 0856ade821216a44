"""pipeline.build.slo: `pipeline build --slo` takes the SLO search's choice for its own target."""

from __future__ import annotations

import pytest

from pipeline.build import BuildSpec, plan_build
from pipeline.core.errors import InvalidInputError
from pipeline.planner.prices import load_prices
from pipeline.planner.search import SearchSpec, search
from pipeline.planner.slo import parse_slo

from planner_cases import LLAMA_8B

SLO = "ttft_p99_ms=500,tpot_p99_ms=40"


def test_the_build_takes_the_searchs_limits_and_records_the_choice(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    plan = plan_build(BuildSpec(gpu="h100", checkpoint=LLAMA_8B, slo=SLO, slo_isl=2048, slo_osl=256))
    expected = search(SearchSpec(model=LLAMA_8B, slo=parse_slo(SLO), isl=2048, osl=256, gpus=("h100",), quants=("fp16",),
                                 kv_caches=("auto",), tps=(1,)), load_prices()).best_per_gpu[0]
    assert (plan.limits.max_batch_size, plan.limits.max_num_tokens) == (expected.max_batch_size, expected.max_num_tokens)
    assert (plan.limits.max_input_len, plan.limits.max_seq_len) == (2048, 2304)
    record = plan.slo_plan
    assert record["slo"] == parse_slo(SLO).bounds and record["concurrency"] == expected.concurrency
    assert record["prediction"] == expected.latency.model_dump()
    assert record["kv_cache_free_gpu_mem_fraction"] == expected.kv_cache_free_gpu_mem_fraction
    plain = plan_build(BuildSpec(gpu="h100", checkpoint=LLAMA_8B))
    assert plain.slo_plan is None and plain.inputs_hash != plan.inputs_hash


def test_an_slo_build_needs_its_traffic_and_a_feasible_slo(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    with pytest.raises(InvalidInputError, match="--isl and --osl"):
        plan_build(BuildSpec(gpu="h100", checkpoint=LLAMA_8B, slo=SLO))
    with pytest.raises(InvalidInputError, match="Closest"):
        plan_build(BuildSpec(gpu="h100", checkpoint=LLAMA_8B, slo="tpot_p99_ms=0.1", slo_isl=2048, slo_osl=256))

"""The planner's speculation model: tokens per step from the acceptance rate, speedup shrinking with concurrency to a
break-even point, draft cost, and the recommendation. Expectations come from the planner's own step_time, not figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.planner import Scenario, step_time
from pipeline.planner.speculation import (SpeculationModel, break_even, recommend_speculation, speculation_curve,
                                          speculation_point, tokens_per_step)
from pipeline.planner.step import steady_load

LLAMA = Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b"
CONCURRENCIES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


@pytest.fixture(scope="module")
def target():
    return Scenario(LLAMA, "h100", "fp16", None, 1, 128, 128)  # short context: GEMM-bound at high batch


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    config = json.loads((LLAMA / "config.json").read_text())
    config.update(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192, head_dim=64)
    folder = tmp_path_factory.mktemp("draft")
    (folder / "config.json").write_text(json.dumps(config))
    return Scenario(folder, "h100", "fp16", None, 1, 128, 128)


def test_tokens_per_step():
    assert tokens_per_step(0.0, 4) == 1.0
    assert tokens_per_step(1.0, 4) == 5.0
    assert tokens_per_step(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_speedup_falls_with_concurrency_to_a_break_even(target):
    points = speculation_curve(target, SpeculationModel(acceptance=0.7, max_draft_len=4), CONCURRENCIES)
    assert points[0].speedup > 1.5  # weight-bound: K+1 tokens cost about one
    assert points[0].speedup < tokens_per_step(0.7, 4)
    speedups = [p.speedup for p in points]
    assert all(later <= earlier + 1e-3 for earlier, later in zip(speedups, speedups[1:]))
    point = break_even(points)
    assert point is not None and point > 1
    assert all(p.speedup <= 1 for p in points if p.concurrency >= point)
    # the baseline is planner.timing's own step
    base = step_time(target, steady_load(target, 8)).total_s
    assert points[3].tpot_ms == pytest.approx(base * 1e3, rel=1e-3)


def test_a_draft_model_costs_and_no_acceptance_never_pays(target, draft):
    free = speculation_point(target, SpeculationModel(0.7, 4), 1)
    drafted = speculation_point(target, SpeculationModel(0.7, 4, draft), 1)
    assert drafted.speedup < free.speedup
    assert speculation_point(target, SpeculationModel(0.0, 4), 1).speedup < 1


def test_recommendation(target):
    low = speculation_point(target, SpeculationModel(0.8, 4), 1)
    # 2048 (was 1024): the fitted cost per decoding sequence per iteration (planner/rates.py) is shared by the ~3.4
    # tokens a verification step emits, which moved this case's break-even from below 256 to ~1536.
    high = speculation_point(target, SpeculationModel(0.8, 4), 2048)
    assert recommend_speculation(low)[0] is True
    enabled, why = recommend_speculation(high)
    assert enabled is False and "leave it off" in why
    assert recommend_speculation(low, tpot_slo_ms=low.tpot_spec_ms * 2)[1].endswith(f"meets the SLO {low.tpot_spec_ms * 2} ms")

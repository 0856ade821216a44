"""make bench-runtime's arithmetic: ratios within a round, medians over rounds, the targets (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.runtime import TARGET_SCALING, TARGET_VS_STATIC, BatchLimitRun, Round, RuntimeBenchResult, RuntimeBenchSpec


def _result(rounds: list[Round], errors: int = 0) -> RuntimeBenchResult:
    spec = RuntimeBenchSpec(url="127.0.0.1:1", model_dir=Path("m"), tokenizer_dir=Path("t"), threads=1)
    return RuntimeBenchResult(spec, rounds, errors)


def test_ratios_are_taken_within_a_round_and_the_median_reported() -> None:
    rounds = [Round(10.0, 30.0, 12.0, 40.0), Round(5.0, 20.0, 6.0, 20.0), Round(10.0, 38.0, 10.0, 40.0)]
    result = _result(rounds)
    assert [r.scaling for r in rounds] == [3.0, 4.0, 3.8]
    assert result.scaling == 3.8  # the median of the per-round ratios, not the ratio of medians (3.33)
    assert result.vs_static == pytest.approx(0.95)
    assert result.static_scaling == pytest.approx(3.333, abs=1e-3)
    assert result.passed
    data = result.as_dict()
    assert data["median"]["scaling"] == 3.8 and data["passed"] is True
    assert [t["met"] for t in data["targets"]] == [True, True, True]


def test_a_missed_target_or_an_error_fails_the_run() -> None:
    slow = _result([Round(10.0, 30.0, 10.0, 40.0)])
    names = {name: met for name, _, _, met in slow.targets()}
    assert slow.scaling < TARGET_SCALING and slow.vs_static < TARGET_VS_STATIC
    assert not names["served c=8 / served c=1"] and not slow.passed
    assert not _result([Round(10.0, 40.0, 10.0, 40.0)], errors=1).passed


def test_batch_limit_medians_per_engine() -> None:
    run = BatchLimitRun(concurrency=8, small_batch=4, large_batch=8, runs=[
        {"batch": 8, "output_tok_s": 36.0, "ttft_p50_ms": 2000.0, "ttft_p90_ms": 2100.0, "latency_p50_ms": 7000.0},
        {"batch": 4, "output_tok_s": 25.0, "ttft_p50_ms": 5800.0, "ttft_p90_ms": 6200.0, "latency_p50_ms": 9900.0},
        {"batch": 8, "output_tok_s": 34.0, "ttft_p50_ms": 1900.0, "ttft_p90_ms": 2000.0, "latency_p50_ms": 6800.0}])
    assert run.median(8, "output_tok_s") == 35.0 and run.median(4, "ttft_p50_ms") == 5800.0
    assert run.as_dict()["median"]["4"]["output_tok_s"] == 25.0

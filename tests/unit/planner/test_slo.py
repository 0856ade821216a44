"""pipeline.planner.slo: SLO parsing and the p50/p99 latency model (expectations from the planner's own functions)."""

from __future__ import annotations

import pytest

from pipeline import planner as P
from pipeline.core.errors import InvalidInputError
from pipeline.planner.slo import SLO_KEYS, latency, meets, parse_slo, shortfall

BUILD = {"max_batch_size": 64, "max_num_tokens": 8192, "kv_cache_free_gpu_mem_fraction": 0.95}


def test_parse_slo_reads_every_key_and_refuses_unknown_ones() -> None:
    slo = parse_slo("ttft_p99_ms=500,tpot_p99_ms=40")
    assert slo.bounds == {"ttft_p99_ms": 500.0, "tpot_p99_ms": 40.0}
    for bad in ("ttft_p95_ms=5", "latency_ms=3", "ttft_p99_ms", "tpot_p99_ms=-1", "tpot_p99_ms=x", ""):
        with pytest.raises(InvalidInputError) as error:
            parse_slo(bad)
        assert all(k in error.value.hint for k in SLO_KEYS)


def test_p50_is_the_planners_prediction_and_p99_its_burst_worst_case(llama8b: P.ModelSpec) -> None:
    scenario = P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 2048, 256)
    for concurrency in (1, 8, 64):
        lat = latency(scenario, concurrency, BUILD)
        p50 = P.predict(scenario, concurrency, build=BUILD)
        assert (lat.ttft_p50_ms, lat.tpot_p50_ms) == (p50.ttft_ms, p50.tpot_ms)
        assert lat.ttft_p99_ms >= lat.ttft_p50_ms and lat.tpot_p99_ms >= lat.tpot_p50_ms
    one, many = latency(scenario, 1, BUILD), latency(scenario, 64, BUILD)
    # a burst of 64 prompts: the last waits for 64 x 2048 tokens of prefill, 8192 per iteration
    assert many.ttft_p99_ms > 16 * P.prefill_time(scenario, 8192) * 1e3 * 0.9
    assert many.ttft_p99_ms > many.ttft_p50_ms and one.ttft_p99_ms == pytest.approx(one.ttft_p50_ms, rel=0.05)


def test_clients_beyond_the_batch_wait_a_whole_wave(llama8b: P.ModelSpec) -> None:
    scenario = P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 512, 128)
    small = {**BUILD, "max_batch_size": 4}
    at_batch, beyond = latency(scenario, 4, small), latency(scenario, 5, small)
    wave_s = (at_batch.tpot_p50_ms * (128 - 1)) / 1e3
    assert beyond.ttft_p99_ms - at_batch.ttft_p99_ms > 0.9 * wave_s * 1e3


def test_meets_and_shortfall(llama8b: P.ModelSpec) -> None:
    lat = latency(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 128), 4, BUILD)
    loose = parse_slo(f"ttft_p99_ms={lat.ttft_p99_ms * 2},tpot_p99_ms={lat.tpot_p99_ms * 2}")
    tight = parse_slo(f"tpot_p99_ms={lat.tpot_p99_ms / 2}")
    assert meets(loose, lat) and shortfall(loose, lat) == pytest.approx(0.5)
    assert not meets(tight, lat) and shortfall(tight, lat) == pytest.approx(2.0)
    scaled = lat.scaled({"ttft": 2.0, "tpot": 3.0})
    assert scaled.ttft_p99_ms == pytest.approx(2 * lat.ttft_p99_ms, rel=1e-3)
    assert scaled.output_tokens_per_s == pytest.approx(lat.output_tokens_per_s / 3, rel=1e-3)

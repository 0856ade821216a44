"""How the published trtllm-bench runs are modelled: trtllm-bench's own build limits, the executor's dynamic batch-size
tuner, prefill arriving in whole chunks, and a cost per decoding sequence (pipeline.planner.published / timing)."""

from __future__ import annotations

import pytest

from pipeline import planner as P
from pipeline.planner.published import published_rows, published_scenario, trtllm_bench_limits
from pipeline.planner.rates import EFFICIENCY
from pipeline.planner.timing import StepLoad, iteration_mix, mean_step, tuned_batch_size


def _scenario(model: str, gpu: str, tp: int, precision: str, isl: int, osl: int):
    row = {"gpu": gpu, "tp": tp, "precision": precision, "isl": isl, "osl": osl}
    return published_scenario(P.published_model(model), row)


def test_limits_are_trtllm_benchs_own_heuristic() -> None:
    """70B FP16 on 2x A100-80GB at 5000/500: (2 x 80 GiB - 2 bytes x params) x 0.95 over 8 KV heads x 5500 tokens holds
    ~16 requests -> max_batch_size 64 (the minimum), max_num_tokens 16 x 11 -> 2048 (the minimum). 8B FP8 on an H200 at
    128/128: capped at 4096 requests -> 4096 and 8192. PyTorch (no chunked prefill): max_num_tokens >= ISL + batch."""
    small = trtllm_bench_limits(_scenario("llama-3.1-70b", "a100-80gb", 2, "FP16", 5000, 500))
    assert (small["max_batch_size"], small["max_num_tokens"], small["chunked_prefill"]) == (64, 2048, True)
    big = trtllm_bench_limits(_scenario("llama-3.1-8b", "h200", 1, "FP8", 128, 128))
    assert (big["max_batch_size"], big["max_num_tokens"]) == (4096, 8192)
    torch = trtllm_bench_limits(_scenario("llama-3.1-70b", "a100-80gb", 2, "FP16", 5000, 500), "pytorch")
    assert (torch["max_num_tokens"], torch["chunked_prefill"], torch["dynamic_batch_size"]) == (5064, False, False)


@pytest.mark.parametrize("capacity, runtime", [(13, 128), (200, 256), (300, 256), (352, 512), (700, 768), (1600, 1536),
                                               (1700, 1700), (2100, 2048), (2300, 2300)])
def test_dynamic_batch_size_tuner(capacity: int, runtime: int) -> None:
    assert tuned_batch_size(capacity) == runtime


def test_prefill_in_whole_chunks_costs_more_than_spread_evenly() -> None:
    """13 sequences of 70B FP16 on 2x A100: spread evenly, 130 prompt tokens ride nearly free under each weight read; in
    chunks of max_num_tokens - 13 they are compute-bound iterations of their own (the mean of the two kinds is larger)."""
    scenario = _scenario("llama-3.1-70b", "a100-80gb", 2, "FP16", 5000, 500)
    build = trtllm_bench_limits(scenario)
    per_step = 13 * 5000 / 500
    mix = iteration_mix(scenario, 13, per_step, build)
    assert [round(w, 4) for w, _ in mix] == [round(1 - per_step / (2048 - 13), 4), round(per_step / (2048 - 13), 4)]
    assert mix[1][1].prefill_tokens == 2048 - 13
    even = P.step_time(scenario, StepLoad(13, 5250, per_step, 2500, 13)).total_s
    assert mean_step(scenario, mix, EFFICIENCY).total_s > 1.15 * even
    assert mean_step(scenario, iteration_mix(scenario, 13, 0, build), EFFICIENCY).prefill_tokens == 0


def test_the_small_batch_long_prompt_row_is_no_longer_50_percent_over() -> None:
    """The row that showed it (published 121.47 tok/s; before the chunk mix +50%), with the shipped constants."""
    row = next(r for r in published_rows("tensorrt") if r["gpu"] == "a100-80gb" and r["model"] == "llama-3.1-70b"
               and r["tp"] == "2" and r["isl"] == "5000")
    (result,) = P.compare_published(None, [row])
    assert result["batch"] == 13 and abs(result["error_pct"]) < 10


def test_each_decoding_sequence_adds_its_cost_per_layer() -> None:
    scenario = _scenario("llama-3.1-8b", "h100-sxm", 1, "FP8", 128, 128)
    one, many = (P.step_time(scenario, StepLoad(b, 200, 0, 0)).overhead_s for b in (1, 257))
    assert many - one == pytest.approx(256 * EFFICIENCY.per_sequence_layer_s * 32)


def test_gemm_time_is_the_larger_bound_or_the_p_norm_of_both() -> None:
    from pipeline.planner.timing import gemm_roofline_s

    assert gemm_roofline_s(3.0, 4.0, None) == 4.0
    assert gemm_roofline_s(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert gemm_roofline_s(1.0, 1.0, 2.0) == pytest.approx(2**0.5)  # at the ridge: neither bound is reached
    assert gemm_roofline_s(1.0, 100.0, 2.0) == pytest.approx(100.0, rel=1e-4)  # far from it: the bound


def test_kv_reads_have_their_own_bandwidth_only_where_a_backend_gives_them_one() -> None:
    from pipeline.planner.rates import PRIOR, efficiency_for, prior_for

    assert PRIOR.kv_read_bandwidth == PRIOR.bandwidth and prior_for("pytorch") == PRIOR
    assert prior_for("tensorrt").kv_bandwidth == PRIOR.bandwidth and prior_for("tensorrt").gemm_roofline_exponent == 2.0
    engines = efficiency_for("tensorrt")
    assert engines.kv_read_bandwidth != engines.bandwidth and efficiency_for("pytorch").kv_bandwidth is None
    scenario = _scenario("llama-3.1-8b", "h100-sxm", 1, "FP8", 128, 2048)
    load = StepLoad(decode=256, decode_context=1152, prefill_tokens=0, prefill_context=0)
    step = P.step_time(scenario, load, engines)
    kv_bytes = 256 * 1152 * P.kv_bytes_per_token(scenario.model, scenario.kv, 1)
    assert step.decode_attention_s == pytest.approx(kv_bytes / (3.35e12 * engines.kv_read_bandwidth))


def test_a_published_run_is_served_in_waves_of_its_batch() -> None:
    """All requests of a run are queued at once and have the same ISL/OSL: the runtime serves them in waves of its batch,
    the last wave the remainder. 1500 requests of 128/4096 at a batch of 352: four full waves and one of 92."""
    from pipeline.planner.published import bench_requests
    from pipeline.planner.timing import max_throughput

    scenario = _scenario("llama-3.1-70b", "h100-sxm", 4, "FP8", 128, 4096)
    build = trtllm_bench_limits(scenario)
    steady = max_throughput(scenario, build=build)
    assert bench_requests("0.17", 128, 4096) == 1500 and steady.batch == 352
    waves = max_throughput(scenario, build=build, requests=1500)
    last = max_throughput(scenario, build=dict(build, max_batch_size=92))
    assert last.batch == 92
    per_position_s = 4 * 352 / steady.output_tokens_per_s + 92 / last.output_tokens_per_s
    assert waves.output_tokens_per_s == pytest.approx(1500 / per_position_s, rel=1e-3)
    assert waves.output_tokens_per_s < steady.output_tokens_per_s
    few = max_throughput(scenario, build=build, requests=100)  # fewer requests than the batch: one wave of them all
    assert few.batch == 100


def test_every_row_knows_how_many_requests_its_run_had() -> None:
    """All but the 1.2-dev page's 1000/1000 rows: that page's table names 1024/1024, not 1000/1000 (steady state)."""
    from pipeline.planner.published import bench_requests

    unknown = set()
    for row in published_rows():
        count = bench_requests(row["trtllm_version"], int(row["isl"]), int(row["osl"]))
        if count is None:
            unknown.add((row["trtllm_version"], row["isl"], row["osl"]))
        else:
            assert count in (30000, 3000, 1500, 1000)
    assert unknown == {("1.2-dev", "1000", "1000")}
    assert bench_requests("0.17", 1, 1) is None


def test_gddr_memory_is_what_the_device_reports_with_ecc_on() -> None:
    from pipeline.core.gpus import get_gpu

    l40s = get_gpu("l40s")
    assert l40s.memory_gib == 48.0 and l40s.usable_memory_gib == pytest.approx(46068 / 1024, abs=0.01)
    assert get_gpu("h100-sxm").usable_memory_gib == 80.0  # HBM: the datasheet's figure
    scenario = _scenario("llama-3.1-8b", "l40s", 1, "FP8", 128, 128)
    assert P.memory_plan(scenario).gpu_memory_gib == pytest.approx(44.99, abs=0.01)


def test_fp4_without_rows_of_its_own_follows_fp8_by_the_ratio_measured_on_silicon() -> None:
    """B200 (data/trtllm_gemm_rate.tsv, M 8192): NVFP4 3491.8 of 9000 TFLOP/s, FP8 2262.1 of 4500: 0.388 against 0.503."""
    from pipeline.planner.rates import PRIOR, efficiency_for, fp4_share_of_fp8

    assert fp4_share_of_fp8() == pytest.approx((3491.8 / 9000) / (2262.1 / 4500), rel=1e-6)
    assert PRIOR.compute_for(4) == pytest.approx(PRIOR.compute_8bit * fp4_share_of_fp8())
    engines, pytorch = efficiency_for("tensorrt"), efficiency_for("pytorch")
    assert engines.compute_4bit is None and engines.compute_for(4) == pytest.approx(engines.compute_8bit * 0.7718, rel=1e-3)
    assert pytorch.compute_for(4) == pytorch.compute_4bit  # fitted on the B200 rows

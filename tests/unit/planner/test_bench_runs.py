"""How the published trtllm-bench runs are modelled: trtllm-bench's own build limits, the executor's dynamic batch-size
tuner, prefill arriving in whole chunks, and a cost per decoding sequence (pipeline.planner.published / timing)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline import planner as P
from pipeline.planner.published import published_rows, published_scenario, trtllm_bench_limits
from pipeline.planner.rates import EFFICIENCY
from pipeline.planner.step import StepLoad, iteration_mix, mean_step
from pipeline.planner.timing import tuned_batch_size


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
    from pipeline.planner.step import gemm_roofline_s

    assert gemm_roofline_s(3.0, 4.0, None) == 4.0
    assert gemm_roofline_s(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert gemm_roofline_s(1.0, 1.0, 2.0) == pytest.approx(2**0.5)  # at the ridge: neither bound is reached
    assert gemm_roofline_s(1.0, 100.0, 2.0) == pytest.approx(100.0, rel=1e-4)  # far from it: the bound


def _measured_kv_gbps(gpu: str, dtype: str, head_dim: int, heads: int, kv_heads: int) -> float:
    """The figure of pipeline/data/trtllm_decode_attention_bandwidth.tsv for this GPU and per-rank shape."""
    from pipeline.data import packaged_fact_rows

    found = [float(r["median_gbps"]) for r in packaged_fact_rows("trtllm_decode_attention_bandwidth.tsv")
             if (r["gpu"], r["kv_dtype"], r["head_dim"], r["heads"], r["kv_heads"]) == (gpu, dtype, str(head_dim), str(heads), str(kv_heads))]
    assert len(found) == 1, (gpu, dtype, head_dim, heads, kv_heads)
    return found[0]


def test_the_kv_read_table_names_the_silicon_file_of_every_figure() -> None:
    """Each figure of data/trtllm_decode_attention_bandwidth.tsv names the AIConfigurator file it was read from, whose
    release it gives; only A100's collection is marked legacy."""
    from pipeline.data import packaged_fact_rows

    rows = packaged_fact_rows("trtllm_decode_attention_bandwidth.tsv")
    assert {r["gpu"] for r in rows} == {"a100-80gb", "h100-sxm", "h200", "b200", "l40s"}
    for r in rows:
        assert r["source"] == f"systems/data/{r['system']}/attention/trtllm/{r['trtllm_version']}/generation_attention_perf.parquet"
        assert r["kv_dtype"] in ("bfloat16", "fp8") and int(r["points"]) > 0 and int(r["kv_heads"]) <= 16
    assert {r["gpu"] for r in rows if r["provenance"] == "legacy"} == {"a100-80gb"}


def test_both_backends_read_the_kv_cache_at_the_bandwidth_measured_on_silicon_for_the_rank_shape() -> None:
    """8B FP8 on H100 at TP 1 runs 32 query and 8 KV heads per rank: its decode attention reads at the silicon figure for
    that shape (AIConfigurator's generation_attention_perf); 70B at TP 8 has one KV head per rank, which reads slower.
    Both backends run TensorRT-LLM's attention kernels; only engines' compute fractions are shares of silicon's GEMM rates."""
    from pipeline.planner.rates import PRIOR, efficiency_for, kv_read_fraction, prior_for

    assert prior_for("pytorch") == replace(PRIOR, kv_bandwidth_measured=True, gemm_roofline_exponent=2.0, moe_measured=True,
                                           sliding_windows=True) and not PRIOR.kv_bandwidth_measured
    assert prior_for("tensorrt").kv_bandwidth_measured and prior_for("tensorrt").gemm_roofline_exponent == 2.0
    assert prior_for("tensorrt").gemm_rate_measured and not prior_for("pytorch").gemm_rate_measured
    engines = efficiency_for("tensorrt")
    assert engines.kv_bandwidth_measured and efficiency_for("pytorch").kv_bandwidth_measured
    scenario = _scenario("llama-3.1-8b", "h100-sxm", 1, "FP8", 128, 2048)
    load = StepLoad(decode=256, decode_context=1152, prefill_tokens=0, prefill_context=0)
    kv_bytes = 256 * 1152 * P.kv_bytes_per_token(scenario.model, scenario.kv, 1)
    measured = _measured_kv_gbps("h100-sxm", "fp8", 128, 32, 8) * 1e9
    assert P.step_time(scenario, load, engines).decode_attention_s == pytest.approx(kv_bytes / measured, rel=1e-9)
    pytorch = efficiency_for("pytorch")
    assert P.step_time(scenario, load, pytorch).decode_attention_s == pytest.approx(kv_bytes / measured, rel=1e-9)
    assert kv_read_fraction("h100-sxm", 1, 128, 8, 1) == pytest.approx(_measured_kv_gbps("h100-sxm", "fp8", 128, 8, 1) / 3350)
    assert kv_read_fraction("h100-sxm", 1, 128, 8, 1) < 0.9 * kv_read_fraction("h100-sxm", 1, 128, 64, 8)
    assert kv_read_fraction("cpu", 2, 64, 9, 3) is None


def test_a_gpu_whose_silicon_figures_exceed_its_datasheet_bandwidth_takes_the_median_of_the_others() -> None:
    """A100's table (AIConfigurator's legacy TensorRT-LLM 1.0 collection) reads at up to 1.45x its 2.04 TB/s: it does not
    measure HBM reads, so A100, like a GPU without a table, takes the median of the GPUs measured."""
    import statistics

    from pipeline.planner.rates import kv_read_fraction

    assert _measured_kv_gbps("a100-80gb", "bfloat16", 128, 32, 8) > 2039
    from pipeline.core.gpus import gpu_table

    expected = statistics.median(_measured_kv_gbps(g, "bfloat16", 128, 32, 8) / (gpu_table()[g].hbm_bandwidth_tbps * 1e3)
                                 for g in ("h100-sxm", "h200", "b200", "l40s"))
    assert kv_read_fraction("a100-80gb", 2, 128, 32, 8) == pytest.approx(expected)
    assert kv_read_fraction("l4", 2, 128, 32, 8) == pytest.approx(expected)
    # a shape the table lacks takes the nearest measured one's figure (same head_dim, then heads and KV heads by ratio)
    assert kv_read_fraction("h100-sxm", 2, 128, 28, 4) == pytest.approx(_measured_kv_gbps("h100-sxm", "bfloat16", 128, 32, 4) / 3350)


def test_a_published_run_is_served_in_waves_of_its_batch() -> None:
    """All requests of a run are queued at once and have the same ISL/OSL: the runtime serves them in waves of its batch,
    the last wave the remainder. 1500 requests of 128/4096 at a batch of 352: four full waves and one of 92. The replay
    (planner/offline.py) comes to that within 0.1%: 2048 tokens an iteration admit a wave's 352 prompts of 128 so fast
    that the wave takes 4,120 iterations, not 4,096."""
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
    """Every row of every published table; the 1.2-dev page's 1000/1000 rows, which its table does not name, with the 1.0
    page's count for 1000/1000 (as 1.2-dev's own for 1024/1024), and the table row says where that came from."""
    from pipeline.data import packaged_fact_rows
    from pipeline.planner.published import bench_requests

    for row in [*published_rows(), *P.more_model_rows(), *P.more_gpu_rows(), *P.dep_rows()]:
        assert bench_requests(row["trtllm_version"], int(row["isl"]), int(row["osl"])) in (30000, 3000, 1500, 1000), row
    borrowed, = (r for r in packaged_fact_rows("trtllm_bench_requests.tsv") if (r["trtllm_version"], r["isl"]) == ("1.2-dev", "1000"))
    assert borrowed["num_requests"] == "3000" and borrowed["commit"] == "00f37686aa854010d68bcbd0f4ab000221541ca6"
    assert bench_requests("1.2-dev", 1024, 1024) == bench_requests("1.0", 1000, 1000) == 3000
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
    assert pytorch.compute_for(4) == pytorch.compute_4bit  # fitted on the B200 rows
    # engines' fractions are shares of silicon's own rates, which hold the ratio already: FP4 takes the 8-bit share of
    # B200's measured NVFP4 rate
    from pipeline.core.gpus import get_gpu
    from pipeline.core.quant import quant_format
    from pipeline.planner.rates import measured_gemm_rate

    assert engines.compute_4bit is None and engines.compute_for(4) == engines.compute_8bit
    b200 = get_gpu("b200")
    assert measured_gemm_rate(b200, quant_format("nvfp4")) == pytest.approx(3491.8e12)
    assert measured_gemm_rate(b200, quant_format("nvfp4")) / measured_gemm_rate(b200, quant_format("fp8")) == pytest.approx(
        2 * fp4_share_of_fp8(), rel=1e-6)


def test_engine_gemms_run_at_shares_of_the_rate_measured_on_silicon() -> None:
    """data/trtllm_gemm_rate.tsv at M 8192: L40S's FP8 GEMMs reach 348.5 of its 733 dense TFLOP/s, H100's 1207.3 of 1979. A
    GPU the table lacks (L4) gets its datasheet rate times the median share of the GPUs measured; the CPU its own rate."""
    import statistics

    from pipeline.core.gpus import get_gpu
    from pipeline.core.quant import quant_format
    from pipeline.planner.rates import compute_rate, measured_gemm_rate

    fp8 = quant_format("fp8")
    assert measured_gemm_rate(get_gpu("l40s"), fp8) == pytest.approx(348.5e12)
    assert measured_gemm_rate(get_gpu("h100-sxm"), fp8) == pytest.approx(1207.3e12)
    shares = statistics.median([348.5 / 733, 1207.3 / 1979, 1238.0 / 1979, 2262.1 / 4500])
    assert measured_gemm_rate(get_gpu("l4"), fp8) == pytest.approx(242.5e12 * shares)
    assert measured_gemm_rate(get_gpu("a100-80gb"), quant_format("int4_awq")) == pytest.approx(262.3e12)  # 16-bit GEMMs
    cpu = get_gpu("cpu").model_copy(update={"dense_bf16_tflops": 0.1})
    assert measured_gemm_rate(cpu, quant_format("fp16")) == compute_rate(cpu, quant_format("fp16"))
    scenario = _scenario("llama-3.1-8b", "l40s", 1, "FP8", 128, 128)
    load = StepLoad(decode=0, decode_context=0, prefill_tokens=8192, prefill_context=64)
    engines = P.efficiency_for("tensorrt")
    step = P.step_time(scenario, load, engines)
    math_s = 2 * scenario.model.active_params_per_token * 8192 / (348.5e12 * engines.compute_8bit)
    assert step.gemm_s > math_s  # compute-bound: the 2-norm with the (smaller) weight-read time

"""pipeline.planner.timing: predicted TTFT/TPOT/throughput from the step-time model."""

from __future__ import annotations

import pytest

from pipeline import planner as P

from planner_cases import LLAMA_8B


def test_predict_takes_a_config_path_and_returns_the_bench_fields() -> None:
    prediction = P.predict(P.Scenario(str(LLAMA_8B), "h100", "fp8", "fp8", 1, 512, 128), 4)
    assert prediction.ttft_ms > 0 and prediction.tpot_ms > 0 and prediction.output_tokens_per_s > 0
    assert prediction.batch == 4


def test_prefill_and_decode_behave_differently(llama8b: P.ModelSpec) -> None:
    short = P.predict(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 256, 256), 1)
    long_prompt = P.predict(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 8192, 256), 1)
    assert long_prompt.ttft_ms > 10 * short.ttft_ms  # compute-bound prefill grows with ISL
    assert long_prompt.tpot_ms > short.tpot_ms  # decode reads a longer KV cache
    batch1 = P.predict(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 256), 1)
    # batch 1 decode is a weight read: ~8.5 GiB over HBM bandwidth x efficiency
    weight_read_ms = P.weight_bytes(llama8b, "fp8") / (3.35e12 * P.EFFICIENCY.bandwidth) * 1e3
    assert weight_read_ms < batch1.tpot_ms < weight_read_ms * 1.3
    batch32 = P.predict(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 256), 32)
    assert batch32.output_tokens_per_s > 10 * batch1.output_tokens_per_s  # batching amortises the weight read
    assert batch32.tpot_ms > batch1.tpot_ms
    hbm = P.predict(P.Scenario(llama8b, "h200", "fp8", "fp8", 1, 1024, 256), 1)
    assert hbm.tpot_ms < batch1.tpot_ms  # more bandwidth, faster decode


def test_tensor_parallel_speeds_up_prefill_and_decode(llama8b: P.ModelSpec) -> None:
    tp1 = P.predict(P.Scenario(llama8b, "h100", "bf16", None, 1, 4096, 256), 1)
    tp2 = P.predict(P.Scenario(llama8b, "h100", "bf16", None, 2, 4096, 256), 1)
    assert tp2.ttft_ms < tp1.ttft_ms and tp2.tpot_ms < tp1.tpot_ms
    assert tp2.tpot_ms > tp1.tpot_ms / 2  # all-reduces and replicated work: not a perfect halving
    pcie = P.predict(P.Scenario(llama8b, "l40s", "fp8", "fp8", 2, 4096, 256), 1)
    step = P.step_time(P.Scenario(llama8b, "l40s", "fp8", "fp8", 2, 4096, 256),
                       P.StepLoad(decode=1, decode_context=4096, prefill_tokens=0, prefill_context=0))
    assert step.allreduce_s > 0 and pcie.tpot_ms > 0


def test_pcie_all_reduce_runs_at_the_cards_pcie_generation(llama8b: P.ModelSpec) -> None:
    """Without NVLink the TP all-reduce crosses PCIe x16: Gen5 on the RTX PRO 6000 Blackwell (64 GB/s a direction),
    Gen4 on the L40S (32 GB/s), so the same message takes half the transfer time on the first."""
    from pipeline.core.gpus import get_gpu
    from pipeline.planner.rates import ALLREDUCE_EFFICIENCY, link_bandwidth

    (gen5, latency5), (gen4, latency4) = link_bandwidth(get_gpu("rtx-pro-6000"), 2), link_bandwidth(get_gpu("l40s"), 2)
    assert gen5 == pytest.approx(2 * gen4) and latency5 == latency4
    load = P.StepLoad(decode=64, decode_context=2048, prefill_tokens=0, prefill_context=0)
    blackwell = P.step_time(P.Scenario(llama8b, "rtx-pro-6000", "fp8", "fp8", 2, 1024, 1024), load).allreduce_s
    ada = P.step_time(P.Scenario(llama8b, "l40s", "fp8", "fp8", 2, 1024, 1024), load).allreduce_s
    transfer = 2 * llama8b.num_layers * (64 * llama8b.hidden_size * 2) / ALLREDUCE_EFFICIENCY  # 2 calls a layer; ring 2(tp-1)/tp = 1
    assert ada - blackwell == pytest.approx(transfer / gen4 - transfer / gen5)


def test_gb200_all_reduce_stays_on_nvlink_across_its_rack() -> None:
    """NVL72's NVLink joins 72 GPUs (18 trays of 4): a TP 16 GB200 all-reduce runs over NVLink, a B200's (8 to a board)
    over InfiniBand."""
    from pipeline.core.gpus import get_gpu
    from pipeline.planner.rates import ALLREDUCE_LATENCY_S, INTERNODE_BANDWIDTH, NVLINK_BANDWIDTH, link_bandwidth

    gb200, b200 = get_gpu("gb200"), get_gpu("b200")
    assert (gb200.gpus_per_node, gb200.nvlink_domain, b200.nvlink_domain) == (4, 72, 8)
    assert link_bandwidth(gb200, 16) == link_bandwidth(gb200, 72) == (NVLINK_BANDWIDTH["blackwell"], ALLREDUCE_LATENCY_S["nvlink"])
    assert link_bandwidth(gb200, 144) == link_bandwidth(b200, 16) == (INTERNODE_BANDWIDTH["blackwell"], ALLREDUCE_LATENCY_S["internode"])
    assert link_bandwidth(get_gpu("l40s"), 16)[1] == ALLREDUCE_LATENCY_S["internode"]


def test_queueing_beyond_capacity(llama8b: P.ModelSpec) -> None:
    build = P.recommend_build(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024), "latency")
    at_cap = P.predict(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024), build["max_batch_size"], build=build)
    over = P.predict(P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024), 4 * build["max_batch_size"], build=build)
    assert over.batch == at_cap.batch == build["max_batch_size"]
    assert over.output_tokens_per_s == pytest.approx(at_cap.output_tokens_per_s, rel=1e-6)
    assert over.ttft_ms > 10 * at_cap.ttft_ms  # the extra clients wait in the queue


def test_all_reduce_latency_is_the_measured_one_where_the_gpu_has_it() -> None:
    from pipeline.core.gpus import get_gpu, gpu_table
    from pipeline.planner.comm import _allreduce_table, measured_allreduce_s

    table = _allreduce_table()
    assert {gpu for gpu, _ in table} <= set(gpu_table()) and {tp for _, tp in table} == {2, 4, 8}
    for sizes, seconds in table.values():
        assert sizes == sorted(sizes) and seconds == sorted(seconds)  # never faster for a larger message
    h100 = get_gpu("h100-sxm")
    sizes, seconds = table[("h100-sxm", 8)]
    assert measured_allreduce_s(h100, 8, sizes[12]) == pytest.approx(seconds[12])
    between = measured_allreduce_s(h100, 8, (sizes[12] * sizes[13]) ** 0.5)
    assert seconds[12] <= between <= seconds[13]
    assert measured_allreduce_s(h100, 8, 4 * sizes[-1]) == pytest.approx(4 * seconds[-1])
    assert measured_allreduce_s(h100, 3, 1e6) is None and measured_allreduce_s(get_gpu("l4"), 2, 1e6) is None
    # TP 8 is slower than TP 2 at a decode-sized message (64 tokens of an 8192-wide model): more peers to hear from
    assert measured_allreduce_s(h100, 8, 64 * 8192) > 2 * measured_allreduce_s(h100, 2, 64 * 8192)


def test_tensor_parallelism_beyond_one_node_all_reduces_over_infiniband() -> None:
    """TP 16 spans two 8-GPU nodes: its all-reduces run at one InfiniBand NIC per GPU (400 Gb/s on H100 systems), not at
    NVLink's 450 GB/s, so TP 16 gets no faster per token than TP 8 where the all-reduce matters."""
    from pipeline.planner.rates import ALLREDUCE_EFFICIENCY, ALLREDUCE_LATENCY_S, INTERNODE_BANDWIDTH

    model = P.model_spec_from_dict({"hidden_size": 16384, "num_hidden_layers": 126, "num_attention_heads": 128,
                                    "num_key_value_heads": 8, "intermediate_size": 53248, "vocab_size": 128256},
                                   "llama-3.1-405b")
    load = P.StepLoad(decode=256, decode_context=2048, prefill_tokens=0, prefill_context=0)
    across = P.step_time(P.Scenario(model, "h100", "fp8", "fp8", 16, 1024, 1024), load)
    message = 256 * model.hidden_size * 2
    per_call = ALLREDUCE_LATENCY_S["internode"] + 2 * 15 / 16 * message / (INTERNODE_BANDWIDTH["hopper"] * ALLREDUCE_EFFICIENCY)
    assert across.allreduce_s == pytest.approx(2 * model.num_layers * per_call)
    within = P.step_time(P.Scenario(model, "h100", "fp8", "fp8", 8, 1024, 1024), load)
    assert across.allreduce_s > 3 * within.allreduce_s and across.total_s > within.total_s


def test_a_moe_decode_reads_only_the_experts_its_tokens_reach() -> None:
    """Mixtral 8x7B routes each token to 2 of 8 experts: one decoding sequence reads the attention and router weights and
    a quarter of the experts' (its batch-1 TPOT is a read of ~13 B weights, not 47 B), a large batch reads them all."""
    from pipeline.planner.memory import weight_bytes_read_per_step

    mixtral = P.model_spec_from_dict({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                                      "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}, "mixtral")
    total = P.weight_bytes_per_gpu(mixtral, "fp8", 1)
    experts = mixtral.routed_expert_params  # FP8: a byte per weight
    assert weight_bytes_read_per_step(mixtral, "fp8", 1, 1) == pytest.approx(total - experts * (1 - 2 / 8))
    assert weight_bytes_read_per_step(mixtral, "fp8", 1, 4096) == pytest.approx(total, rel=1e-9)
    assert weight_bytes_read_per_step(mixtral, "fp8", 1, 8) < weight_bytes_read_per_step(mixtral, "fp8", 1, 64) < total
    batch1 = P.predict(P.Scenario(mixtral, "h100", "fp8", "fp8", 1, 1024, 256), 1)
    active_read_ms = weight_bytes_read_per_step(mixtral, "fp8", 1, 1) / (3.35e12 * P.EFFICIENCY.bandwidth) * 1e3
    assert active_read_ms < batch1.tpot_ms < 1.3 * active_read_ms
    llama = P.model_spec_from_config(LLAMA_8B)
    assert weight_bytes_read_per_step(llama, "fp8", 1, 1) == P.weight_bytes_per_gpu(llama, "fp8", 1)  # dense: all of it


def test_the_roofline_knee_describes_nvidias_silicon_gemms_better_than_the_larger_bound() -> None:
    """The engines' GEMM time is the 2-norm of weight-read and math time (step.gemm_roofline_s). NVIDIA's measured GEMM
    latencies (data/trtllm_gemm_rate.tsv, from AIConfigurator's gemm_perf.parquet: the median over dense-layer shapes of
    latency / roofline, M 8 to 8192) say the same without any published row: on every GPU and dtype the 2-norm is nearer
    on average over M (mean |log ratio|); the larger bound misses by up to 1.80x near the ridge (A100 INT8 SmoothQuant at
    M 256), the 2-norm by at most 1.37x (the same GEMMs), 0.86x at worst the other way (H100 BF16 at M 256)."""
    from collections import defaultdict
    import math

    from pipeline.data import packaged_fact_rows

    misses: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in packaged_fact_rows("trtllm_gemm_rate.tsv"):
        misses[(row["gpu"], row["dtype"])].append((float(row["latency_over_max"]), float(row["latency_over_2norm"])))
    assert len(misses) >= 9
    for key, ratios in misses.items():
        larger, two_norm = (sum(abs(math.log(r[i])) for r in ratios) / len(ratios) for i in (0, 1))
        assert two_norm < larger, key
        assert all(0.85 < r[1] < 1.4 for r in ratios), key
    assert max(r[0] for ratios in misses.values() for r in ratios) > 1.75


def test_moe_layer_time_is_read_off_silicon_where_the_shape_was_timed() -> None:
    """measured_moe_s reads data/trtllm_moe_latency.tsv: a measured token count exactly, log-log between two, proportional
    beyond the largest; None for a shape, dtype or GPU it lacks and for a dense model. A backend that times its experts
    so (moe_measured) adds that time per MoE layer and reads no expert weights in its roofline."""
    from dataclasses import replace

    from pipeline.planner.moe_timing import measured_moe_s
    from pipeline.planner.rates import efficiency_for
    from pipeline.planner.published import published_model
    from pipeline.core.gpus import get_gpu
    from pipeline.core.quant import quant_format

    qwen = published_model("qwen3-30b-a3b")
    b200, fp4 = get_gpu("b200"), quant_format("nvfp4")
    assert measured_moe_s(b200, fp4, qwen, 1, 2048) == pytest.approx(357.45e-6)  # the table's row for this shape
    between = measured_moe_s(b200, fp4, qwen, 1, 2560)
    assert measured_moe_s(b200, fp4, qwen, 1, 2048) < between < measured_moe_s(b200, fp4, qwen, 1, 3072)
    assert measured_moe_s(b200, fp4, qwen, 1, 32768) == pytest.approx(2 * measured_moe_s(b200, fp4, qwen, 1, 16384))
    assert measured_moe_s(b200, quant_format("int4_awq"), qwen, 1, 2048) is None
    assert measured_moe_s(get_gpu("h100"), fp4, qwen, 1, 2048) is None
    assert measured_moe_s(b200, fp4, published_model("llama-3.1-8b"), 1, 2048) is None
    scenario = P.Scenario(qwen, "b200", "nvfp4", "fp8", 1, 1024, 1024)
    load = P.StepLoad(decode=1024, decode_context=1536, prefill_tokens=1024, prefill_context=512)
    pytorch = efficiency_for("pytorch")
    timed = P.step_time(scenario, load, pytorch).gemm_s
    shared = P.step_time(scenario, load, replace(pytorch, moe_measured=False)).gemm_s
    assert timed > shared  # silicon's grouped GEMMs over 128 narrow experts are slower than the dense rate says
    assert timed > 48 * measured_moe_s(b200, fp4, qwen, 1, 2048)


def test_sliding_window_layers_read_and_attend_only_their_window_on_the_pytorch_backend() -> None:
    """Gemma 3 27B's shapes (52 of 62 layers windowed to 1024 tokens): at 8k tokens of context the PyTorch backend's decode
    attention reads (10 x 8k + 52 x 1024) / (62 x 8k) of the KV cache, and a prompt's attention math shrinks the same
    way; engines attend to the whole context; the KV cache, and so the batch, is the same either way."""
    from dataclasses import replace

    gemma3 = P.model_spec_from_dict({
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
        "sliding_window": 1024, "sliding_window_pattern": 6, "tie_word_embeddings": True}, "gemma-3-27b")
    assert gemma3.sliding_windows.count(1024) == 52 and gemma3.sliding_windows.count(0) == 10
    scenario = P.Scenario(gemma3, "h100", "fp8", "fp8", 1, 8192, 1024)
    load = P.StepLoad(decode=16, decode_context=8192, prefill_tokens=2048, prefill_context=4096)
    pytorch = P.efficiency_for("pytorch")
    whole = replace(pytorch, sliding_windows=False)
    windowed, everything = P.step_time(scenario, load, pytorch), P.step_time(scenario, load, whole)
    share = (10 * 8192 + 52 * 1024) / (62 * 8192)
    assert windowed.decode_attention_s == pytest.approx(everything.decode_attention_s * share, rel=1e-9)
    assert windowed.context_attention_s == pytest.approx(everything.context_attention_s * (10 * 4096 + 52 * 1024) / (62 * 4096))
    assert windowed.gemm_s == everything.gemm_s  # the weights are read and multiplied all the same
    engines = P.efficiency_for("tensorrt")
    assert not engines.sliding_windows  # the C++ runtime windows a layer only with max_attention_window_size, unset
    assert P.step_time(scenario, load, engines).decode_attention_s == P.step_time(
        scenario.replace(model=gemma3.model_copy(update={"sliding_windows": ()})), load, engines).decode_attention_s
    fast, slow = (P.max_throughput(scenario, efficiency=eff) for eff in (pytorch, whole))
    assert fast.batch == slow.batch and fast.output_tokens_per_s > slow.output_tokens_per_s
    # no published PyTorch-backend row is of a windowed model: this is NVIDIA's model classes' structure, unscored
    from pipeline.planner.published import published_model, published_rows

    assert not any(published_model(m).sliding_windows for m in {r["model"] for r in published_rows("pytorch")})


def test_a_prompt_waits_behind_the_other_clients_prompts_in_prefill(llama8b: P.ModelSpec) -> None:
    """The p50 TTFT adds the M/D/1 wait behind other clients' prompts (timing.prefill_wait_s): none for one client,
    growing with the clients, at the rate the closed loop itself leaves (the wait is the fixed point it solves)."""
    from pipeline.planner.timing import prefill_wait_s

    assert prefill_wait_s(0.4, 0, 10.0) == 0.0
    waits = [prefill_wait_s(0.4, others, 10.0) for others in (1, 4, 24, 49)]
    assert waits == sorted(waits) and 0 < waits[0] < 0.01
    for others, wait in zip((1, 4, 24, 49), waits):
        rho = others * 0.4 / (0.4 + wait + 10.0)
        assert wait == pytest.approx(rho * 0.4 / (2 * (1 - rho)), rel=1e-6)
    saturated = prefill_wait_s(0.4, 200, 10.0)  # 200 prompts a cycle need 80 s of prefill: the loop slows to fit them
    assert 200 * 0.4 <= 0.4 + saturated + 10.0 < 200 * 0.4 * 1.01
    scenario = P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 4000, 400)
    alone = P.prefill_time(scenario, 8192)
    build = {"max_batch_size": 256, "max_num_tokens": 8192, "kv_cache_free_gpu_mem_fraction": 0.9}
    one, many = (P.predict(scenario, c, build=build) for c in (1, 64))
    assert one.ttft_ms == pytest.approx(alone * 1e3, rel=1e-3)
    assert many.ttft_ms > alone * 1e3 + many.tpot_ms / 2 * 1.01

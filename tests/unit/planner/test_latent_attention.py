"""pipeline.planner.latent: multi-head latent attention (DeepSeek-V3/R1) planned with its own cache and math, checked
against the published DeepSeek R1 runs and AIConfigurator's silicon-timed estimate of them (scripts/plan_vs_mla.py)."""

from __future__ import annotations

import pytest

from pipeline import planner as P
from pipeline.cli import run
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.quant import kv_cache_format
from pipeline.planner.caveats import accuracy_caveats, layout_caveats
from pipeline.planner.latent import _decode_table
from pipeline.planner.published import shipped_config
from pipeline.planner.rates import efficiency_for
from pipeline.planner.step import StepLoad, step_work

from planner_cases import script_module

DEEPSEEK = P.published_model("deepseek-r1")


def test_deepseek_r1_shapes_are_its_published_sizes() -> None:
    """671B parameters and 37B activated per token (DeepSeek-V3's report; embeddings and lm_head counted in the 37B), 58
    of 61 layers MoE with one shared expert, and a head's query and key 128 + 64 wide."""
    assert DEEPSEEK.param_count == pytest.approx(671e9, rel=0.001)
    activated = DEEPSEEK.active_params_per_token + DEEPSEEK.embedding_params + DEEPSEEK.lm_head_params
    assert activated == pytest.approx(37e9, rel=0.02)
    assert (DEEPSEEK.moe_layer_count, DEEPSEEK.shared_expert_intermediate_size, DEEPSEEK.head_dim) == (58, 2048, 192)


def test_kimi_k2_reads_as_its_published_sizes() -> None:
    """Kimi K2 (the DeepSeek-V3 architecture with 64 heads, 384 experts and one dense layer; the keys of
    moonshotai/Kimi-K2-Instruct's config.json as AIConfigurator 0.12.0 ships it): Moonshot's "1T total, 32B activated"."""
    raw = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61,
           "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536,
           "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 384,
           "num_experts_per_tok": 8, "n_shared_experts": 1, "moe_intermediate_size": 2048, "first_k_dense_replace": 1,
           "intermediate_size": 18432, "vocab_size": 163840, "moe_layer_freq": 1, "tie_word_embeddings": False}
    kimi = P.model_spec_from_dict(raw, "kimi-k2")
    assert kimi.param_count == pytest.approx(1.03e12, rel=0.01) and kimi.moe_layer_count == 60
    assert kimi.active_params_per_token + kimi.embedding_params + kimi.lm_head_params == pytest.approx(32.9e9, rel=0.01)
    assert P.kv_bytes_per_token(kimi, "fp8", 8) == 61 * 576


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_cache_is_one_latent_per_token_and_layer_that_every_rank_holds(tp: int) -> None:
    """(kv_lora_rank + qk_rope_head_dim) elements per token and layer, K only (TensorRT-LLM's MLA cache: one KV head of
    576), on every TP rank whatever the TP: 61 x 576 bytes with an FP8 cache, 1/71 of 128 heads' own keys (192) and values (128)."""
    assert P.kv_bytes_per_token(DEEPSEEK, "fp8", tp) == 61 * 576
    assert P.kv_bytes_per_token(DEEPSEEK, "auto", tp) == 61 * 576 * 2
    assert P.kv_heads_per_gpu(DEEPSEEK, tp) == 1


def test_without_silicons_timing_decode_attention_is_math_bound_at_the_caches_precision() -> None:
    """Under DEP a rank runs all 128 heads over each cached latent: 2 x 128 x (576 + 512) FLOPs per token and layer, many
    per byte read, so decode attention takes the math's time; with an FP8 cache the math runs in FP8 (mFP8GenerationMLA),
    with a 16-bit one at the slower 16-bit rate. (A100 and L40S: AIConfigurator's MLA timings of them are "legacy", not
    used.)"""
    eff = efficiency_for("pytorch")
    load = StepLoad(decode=256, decode_context=2048, prefill_tokens=0, prefill_context=0)
    a100 = step_work(P.Scenario(DEEPSEEK, "a100", "bf16", "auto", 8, 1024, 1024, attention_dp=True), load, eff)
    assert a100.latent_decode.measured_s is None and a100.latent_decode.bits == 16
    assert a100.latent_decode.flops == pytest.approx(61 * 2 * 128 * (576 + 512) * 256 * 2048)
    read_s = a100.kv_read_bytes / (a100.hbm * eff.bandwidth)
    math_s = a100.latent_decode.flops / (a100.latent_decode.rate * eff.compute_16bit)
    assert a100.time(eff).decode_attention_s == pytest.approx(math_s) and math_s > 1.5 * read_s
    fp8 = P.Scenario(DEEPSEEK, "l40s", "fp8", "fp8", 8, 1024, 1024, attention_dp=True)
    eight, sixteen = (step_work(scenario, load, eff) for scenario in (fp8, fp8.replace(kv=kv_cache_format("auto"))))
    assert (eight.latent_decode.bits, sixteen.latent_decode.bits) == (8, 16)
    assert sixteen.time(eff).decode_attention_s > 1.5 * eight.time(eff).decode_attention_s
    gqa = step_work(P.Scenario(P.published_model("qwen3-235b-a22b"), "b200", "nvfp4", "fp8", 4, 1024, 1024,
                               attention_dp=True), load, eff)
    assert gqa.latent_decode is None  # grouped-query attention stays a read


def test_where_silicon_timed_it_a_layer_takes_silicons_time_which_the_fp8_math_rate_misses_on_hopper() -> None:
    """B200 and H200 take data/trtllm_mla_decode_latency.tsv's fit (per call, per sequence, per cached token) at 128 heads;
    on Blackwell the FP8 math rate the fallback uses is within 10% of silicon's cost per cached token, on Hopper silicon's
    FP8 decode is over 1.4x slower than that rate (about its 16-bit speed), the reason the timing is used where it exists."""
    eff = efficiency_for("pytorch")
    load = StepLoad(decode=256, decode_context=2048, prefill_tokens=0, prefill_context=0)
    for gpu, quant, low, high in (("b200", "nvfp4", 0.9, 1.1), ("h200", "fp8", 1.4, 1.6)):
        work = step_work(P.Scenario(DEEPSEEK, gpu, quant, "fp8", 8, 1024, 1024, attention_dp=True), load, eff)
        per_call, per_sequence, per_token = _decode_table()[(P.published.as_gpu(gpu).key, "fp8")][128]
        assert work.latent_decode.measured_s == pytest.approx(61 * (per_call + per_sequence * 256 + per_token * 256 * 2048))
        assert work.time(eff).decode_attention_s == work.latent_decode.measured_s
        fallback = 2 * 128 * (576 + 512) / (work.latent_decode.rate * eff.compute_8bit)
        assert low < per_token / fallback < high, gpu


@pytest.mark.parametrize(("key", "value", "kind"), [("index_topk", 2048, "sparse attention"),
                                                    ("compress_ratios", [1, 4, 128], "compressed attention")])
def test_sparse_or_compressed_attention_is_refused_not_priced_as_dense(key: str, value: object, kind: str) -> None:
    """DeepSeek-V3.2 attends to an indexer's top-k tokens (index_topk) and V4 pools its cache (compress_ratios, no
    kv_lora_rank): planned as dense attention they would come out slow at long context, and their caches wrong."""
    raw = {"model_type": "deepseek_v32", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
           "vocab_size": 129280, key: value}
    with pytest.raises(UnsupportedError, match=kind):
        P.model_spec_from_dict(raw, "deepseek")


def test_a_latent_config_without_its_head_sizes_is_refused() -> None:
    raw = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
           "vocab_size": 129280, "kv_lora_rank": 512}
    with pytest.raises(InvalidInputError, match="lacks qk_nope_head_dim, qk_rope_head_dim, v_head_dim"):
        P.model_spec_from_dict(raw, "deepseek")


def test_trtllm_bench_sizes_the_batch_as_its_heuristic_reads_deepseeks_config() -> None:
    """trtllm-bench's heuristic (tuning.py @04cba882) reads head_dim from the config, else hidden / heads: DeepSeek's
    remote-code config has none, so 56, with its 128 KV heads; the runtime's cache is the latent one."""
    assert P.published.bench_head_size(DEEPSEEK) == 56
    scenario = P.published_scenario(DEEPSEEK, P.mla_rows()[0])  # B200 DEP4, 1000/1000
    assert P.published.trtllm_bench_limits(scenario, "pytorch")["max_batch_size"] == 384


def test_the_planner_agrees_with_aiconfigurator_and_the_caveat_says_what_the_published_rows_say() -> None:
    """At the planner's own batch, AIConfigurator (DeepSeek's attention and experts timed on silicon, its own way of
    adding them up) lands within 12% of the planner on every recorded row (within 8.1% before both were told that the NVFP4
    checkpoint keeps the attention's query and KV projections in BF16: that made the planner 2-3% slower, and AIConfigurator
    anywhere from 2.6% slower to 2.1% faster, on B200 and GB200). The caveat quotes the report's figures against the
    published rows."""
    report = script_module("plan_vs_mla").mla_report()
    beside = report["against_aiconfigurator"]
    assert beside["rows"] == 11 and beside["max_abs_pct_error"] <= 12.0
    published = report["published"]
    assert published["rows"] == 14
    groups = {g["gpu"]: g["published"] for g in report["groups"]}
    caveat = next(c for c in accuracy_caveats(DEEPSEEK, "pytorch", efficiency_for("pytorch"), moe_measured=True,
                                              attention_dp=True) if c.startswith("multi-head latent attention"))
    assert (f"{published['median_abs_pct_error']:.1f}% off in the median and {published['max_abs_pct_error']:.0f}% at worst, "
            f"{-groups['b200']['mean_signed_pct_error']:.0f}% slow on B200 and {groups['h200']['mean_signed_pct_error']:.0f}% "
            f"fast on H200") in caveat
    assert f"within {beside['max_abs_pct_error']:.1f}% of this planner at the same batch ({beside['rows']} rows)" in caveat


def test_plan_cli_names_the_latent_cache(capsys) -> None:
    code = run(["plan", "--model", "deepseek-r1", "--gpu", "b200", "--quant", "nvfp4", "--kv-cache", "fp8", "--tp", "4",
                     "--attention-dp", "--backend", "pytorch", "--isl", "1024", "--osl", "1024"])
    out = capsys.readouterr().out
    assert code == 0 and "latent KV cache of 512 + 64 per token and layer" in out and "multi-head latent attention" in out


def test_the_latent_shape_survives_the_plan_result() -> None:
    result = P.plan(P.PlanSpec(model=P.published.shipped_config("deepseek-r1"), gpu="h200", quant="fp8", kv_cache="fp8", tp=8,
                               isl=1024, osl=1024, backend="pytorch", attention_dp=True))
    assert result.fits and result.model["latent_attention"] == {"kv_lora_rank": 512, "qk_rope_head_dim": 64}


def test_tp_without_attention_data_parallelism_is_said_to_replicate_the_cache() -> None:
    """Every TP rank holds every request's whole latent, so the plan's sequences are one GPU's whatever the TP."""
    model = P.published_model("deepseek-r1")
    plans = {adp: P.plan(P.PlanSpec(model=shipped_config("deepseek-r1"), gpu="h200", quant="fp8", kv_cache="fp8", tp=8,
                                    attention_dp=adp, backend="pytorch", isl=1024, osl=1024)) for adp in (False, True)}
    assert any("under TP8 without attention data parallelism" in c for c in plans[False].caveats)
    assert not any("without attention data parallelism" in c for c in plans[True].caveats)
    assert layout_caveats(model, 1, False) == layout_caveats(model, 8, True) == []
    assert layout_caveats(P.published_model("llama-3.1-70b"), 8, False) == []

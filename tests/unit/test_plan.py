"""pipeline plan: shapes -> bytes -> capacity -> predicted latency/throughput, refusals, and the check
against TensorRT-LLM's published throughput table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import plan as P
from pipeline.cli import run
from pipeline.errors import InvalidInputError, UnsupportedError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "llama-3.1-8b"

SMOLLM2_SHAPES = {  # SmolLM2-135M: tied embeddings, GQA 9/3, head_dim 64; 134,515,008 parameters
    "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
    "max_position_embeddings": 8192, "dtype": "float32",
}


@pytest.fixture(scope="module")
def llama8b() -> P.ModelSpec:
    return P.model_spec_from_config(FIXTURE)


def _config(tmp_path: Path, **shapes) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shapes), encoding="utf-8")
    return path


# ---- shapes and bytes -------------------------------------------------------------------------------


def test_llama8b_shapes_and_parameter_count(llama8b: P.ModelSpec) -> None:
    assert (llama8b.num_layers, llama8b.num_heads, llama8b.num_kv_heads, llama8b.head_dim) == (32, 32, 8, 128)
    assert llama8b.param_count == 8_030_261_248  # Meta's published 8.03 B, embeddings and lm_head included
    assert P.model_spec_from_config(FIXTURE / "config.json") == llama8b  # the file works as well as the folder


def test_tied_embeddings_and_head_dim_fallback(tmp_path: Path) -> None:
    model = P.model_spec_from_config(_config(tmp_path, **SMOLLM2_SHAPES))
    assert model.head_dim == 64  # no head_dim in config: hidden / heads
    assert model.lm_head_params == 0
    assert model.param_count == 134_515_008
    untied = P.model_spec_from_config(_config(tmp_path, **{**SMOLLM2_SHAPES, "tie_word_embeddings": False}))
    assert untied.param_count - model.param_count == 49152 * 576


def test_missing_or_foreign_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="config.json"):
        P.model_spec_from_config(tmp_path)
    with pytest.raises(UnsupportedError, match="hidden_size"):
        P.model_spec_from_config(_config(tmp_path, model_type="bert", vocab_size=10))


def test_weight_bytes_per_precision(llama8b: P.ModelSpec) -> None:
    fp16 = P.weight_bytes(llama8b, "fp16")
    assert fp16 == pytest.approx(2 * llama8b.param_count, rel=1e-6)
    fp8 = P.weight_bytes(llama8b, "fp8")
    embeddings = 2 * llama8b.vocab_size * llama8b.hidden_size  # embedding table + lm_head stay 16-bit
    assert fp8 == pytest.approx(llama8b.num_layers * llama8b.matmul_params_per_layer + 2 * embeddings, rel=0.01)
    awq, wo4 = P.weight_bytes(llama8b, "int4_awq"), P.weight_bytes(llama8b, "int4_wo")
    linear = llama8b.num_layers * llama8b.matmul_params_per_layer
    assert awq - wo4 == pytest.approx(linear * 16 / 128 / 8, rel=0.01)  # one 16-bit scale per 128 weights
    assert P.weight_bytes(llama8b, "nvfp4") > wo4  # FP8 scale per 16 weights
    assert fp16 > P.weight_bytes(llama8b, "int8_wo") > awq


def test_kv_bytes_per_token_is_gqa_aware(llama8b: P.ModelSpec) -> None:
    assert P.kv_bytes_per_token(llama8b) == 2 * 32 * 8 * 128 * 2 == 131072
    assert P.kv_bytes_per_token(llama8b, "fp8") == 65536
    assert P.kv_bytes_per_token(llama8b, "fp8", tp=2) == 32768
    assert P.kv_bytes_per_token(llama8b, None, tp=16) == 2 * 32 * 1 * 128 * 2  # one KV head per rank, replicated


# ---- capacity, fit and what would fit ---------------------------------------------------------------


def test_memory_plan_capacity(llama8b: P.ModelSpec) -> None:
    gpu, quant, kv = P._gpu("h100"), P._quant("fp8"), P._kv("fp8")
    memory = P.memory_plan(llama8b, gpu, quant, kv, 1, 1024, 1024, kv_fraction=0.9)
    expected_tokens = memory.free_gib * P.GIB * 0.9 / 65536
    assert memory.kv_capacity_tokens == pytest.approx(expected_tokens, rel=1e-3)
    assert memory.max_sequences == memory.kv_capacity_tokens // 2048
    more = P.memory_plan(llama8b, gpu, quant, kv, 1, 1024, 1024, kv_fraction=0.95)
    assert more.max_sequences > memory.max_sequences


def test_70b_fp16_does_not_fit_one_h100_and_the_plan_says_what_would(tmp_path: Path, capsys) -> None:
    shapes = json.loads((FIXTURE / "config.json").read_text())
    shapes.update(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, intermediate_size=28672)
    config = _config(tmp_path, **shapes)
    result = P.plan(P.PlanSpec(model=config, gpu="h100", quant="fp16", isl=1024, osl=1024))
    assert not result.fits and result.prediction is None
    options = {(a.tp, a.quant) for a in result.alternatives}
    assert (2, "fp16") in options and (1, "fp8") in options
    code = run(["plan", "--model", str(config), "--gpu", "h100", "--quant", "fp16", "--isl", "1024", "--osl", "1024"])
    assert code == 2
    assert "--tp 2 --quant fp16" in capsys.readouterr().err
    assert P.plan(P.PlanSpec(model=config, gpu="h100", quant="fp16", tp=2, isl=1024, osl=1024)).fits
    with pytest.raises(UnsupportedError, match="no room") as refused:  # what the build stage gets
        P.recommend_build(config, "h100", "fp16", None, 1, "throughput", 1024, 1024)
    assert "--tp 2 --quant fp16" in refused.value.hint


# ---- refusals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "v100"], "Unknown GPU"),
        (["--gpu", "a100", "--quant", "fp8"], "cannot run fp8"),
        (["--gpu", "a100", "--kv-cache", "fp8"], "cannot run a fp8 KV cache"),
        (["--gpu", "h100", "--tp", "3"], "does not divide"),
        (["--gpu", "cpu"], "no memory/bandwidth/FLOP figures"),
        (["--gpu", "h100", "--goal", "fastest"], "Unknown goal"),
        (["--gpu", "h100", "--isl", "130000", "--osl", "2000"], "context window"),
    ],
)
def test_cli_refusals_exit_2(args: list[str], message: str, capsys) -> None:
    assert run(["plan", "--model", str(FIXTURE), *args]) == 2
    assert message in capsys.readouterr().err


# ---- predictions -------------------------------------------------------------------------------------


def test_predict_takes_a_config_path_and_returns_the_bench_fields() -> None:
    prediction = P.predict(str(FIXTURE), "h100", "fp8", "fp8", 1, 512, 128, 4)
    assert prediction.ttft_ms > 0 and prediction.tpot_ms > 0 and prediction.output_tokens_per_s > 0
    assert prediction.batch == 4


def test_prefill_and_decode_behave_differently(llama8b: P.ModelSpec) -> None:
    short = P.predict(llama8b, "h100", "fp8", "fp8", 1, 256, 256, 1)
    long_prompt = P.predict(llama8b, "h100", "fp8", "fp8", 1, 8192, 256, 1)
    assert long_prompt.ttft_ms > 10 * short.ttft_ms  # compute-bound prefill grows with ISL
    assert long_prompt.tpot_ms > short.tpot_ms  # decode reads a longer KV cache
    batch1 = P.predict(llama8b, "h100", "fp8", "fp8", 1, 1024, 256, 1)
    # batch 1 decode is a weight read: ~8.5 GiB over HBM bandwidth x efficiency
    weight_read_ms = P.weight_bytes(llama8b, "fp8") / (3.35e12 * P.EFFICIENCY.bandwidth) * 1e3
    assert weight_read_ms < batch1.tpot_ms < weight_read_ms * 1.3
    batch32 = P.predict(llama8b, "h100", "fp8", "fp8", 1, 1024, 256, 32)
    assert batch32.output_tokens_per_s > 10 * batch1.output_tokens_per_s  # batching amortises the weight read
    assert batch32.tpot_ms > batch1.tpot_ms
    hbm = P.predict(llama8b, "h200", "fp8", "fp8", 1, 1024, 256, 1)
    assert hbm.tpot_ms < batch1.tpot_ms  # more bandwidth, faster decode


def test_tensor_parallel_speeds_up_prefill_and_decode(llama8b: P.ModelSpec) -> None:
    tp1 = P.predict(llama8b, "h100", "bf16", None, 1, 4096, 256, 1)
    tp2 = P.predict(llama8b, "h100", "bf16", None, 2, 4096, 256, 1)
    assert tp2.ttft_ms < tp1.ttft_ms and tp2.tpot_ms < tp1.tpot_ms
    assert tp2.tpot_ms > tp1.tpot_ms / 2  # all-reduces and replicated work: not a perfect halving
    pcie = P.predict(llama8b, "l40s", "fp8", "fp8", 2, 4096, 256, 1)
    step = P.step_time(llama8b, P._gpu("l40s"), P._quant("fp8"), P._kv("fp8"), 2,
                       decode=1, decode_context=4096, prefill_tokens=0, prefill_context=0)
    assert step.allreduce_s > 0 and pcie.tpot_ms > 0


def test_queueing_beyond_capacity(llama8b: P.ModelSpec) -> None:
    build = P.recommend_build(llama8b, "h100", "fp8", "fp8", 1, "latency", 1024, 1024)
    at_cap = P.predict(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024, build["max_batch_size"], build=build)
    over = P.predict(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024, 4 * build["max_batch_size"], build=build)
    assert over.batch == at_cap.batch == build["max_batch_size"]
    assert over.output_tokens_per_s == pytest.approx(at_cap.output_tokens_per_s, rel=1e-6)
    assert over.ttft_ms > 10 * at_cap.ttft_ms  # the extra clients wait in the queue


def test_recommend_build(llama8b: P.ModelSpec) -> None:
    throughput = P.recommend_build(llama8b, "h100", "fp8", "fp8", 1, "throughput", 1024, 1024)
    latency = P.recommend_build(llama8b, "h100", "fp8", "fp8", 1, "latency", 1024, 1024)
    keys = {"max_batch_size", "max_num_tokens", "max_input_len", "max_seq_len", "kv_cache_free_gpu_mem_fraction"}
    assert set(throughput) == set(latency) == keys
    assert throughput["max_seq_len"] == 2048 and throughput["max_input_len"] == 1024
    assert throughput["max_batch_size"] > latency["max_batch_size"]
    capacity = P.memory_plan(llama8b, P._gpu("h100"), P._quant("fp8"), P._kv("fp8"), 1, 1024, 1024, kv_fraction=0.95)
    assert capacity.max_sequences <= throughput["max_batch_size"] <= 1.2 * capacity.max_sequences + 32
    assert latency["max_num_tokens"] >= 1024 + latency["max_batch_size"]  # a whole prompt in one chunk
    assert all(isinstance(throughput[k], int) for k in keys - {"kv_cache_free_gpu_mem_fraction"})


def test_cli_json(capsys) -> None:
    code = run(["plan", "--model", str(FIXTURE), "--gpu", "h200", "--quant", "fp8", "--kv-cache", "fp8",
                "--isl", "2048", "--osl", "256", "--concurrency", "8", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["gpu"] == "h200" and data["kv_cache"] == "fp8"
    assert data["prediction"]["batch"] == 8 and data["prediction"]["ttft_ms"] > 0
    assert data["max_throughput"]["output_tokens_per_s"] > data["prediction"]["output_tokens_per_s"]
    assert data["memory"]["kv_bytes_per_token"] == 65536
    assert set(data["constants"]) == set(P.EFFICIENCY.as_dict())


# ---- the published table -----------------------------------------------------------------------------


def test_against_published_trtllm_throughput(llama8b: P.ModelSpec, reference_tsv) -> None:
    """Predicted vs published output tokens/s per row (printed; see with -s), median |error| <= 10%."""
    rows = reference_tsv("trtllm_published_throughput.tsv")
    assert len(rows) >= 36
    comparison = P.compare_published(llama8b, rows)
    print(f"\n{'gpu':10} {'prec':5} {'isl':>6} {'osl':>5} {'published':>10} {'predicted':>10} {'error':>7}  bound")
    for r in comparison:
        print(f"{r['gpu']:10} {r['precision']:5} {r['isl']:6} {r['osl']:5} {r['published_tokens_per_s']:10.0f} "
              f"{r['predicted_tokens_per_s']:10.0f} {r['error_pct']:+6.1f}%  {r['bound']}")
    mdape = P.median_abs_pct_error(comparison)
    print(f"median absolute percentage error: {mdape:.2f}%")
    assert mdape <= 10.0
    assert max(abs(r["error_pct"]) for r in comparison) <= 25.0


def _fit_script():
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "scripts" / "plan_vs_published.py"
    spec = importlib.util.spec_from_file_location("plan_vs_published", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# README, "Capacity and latency planning": the figure quoted is the cross-validated one (5.3% when written).
CV_MEDIAN_MAX_PCT, CV_WORST_MAX_PCT = 6.0, 20.0


@pytest.mark.slow
def test_cross_validated_error_is_what_the_readme_quotes(llama8b: P.ModelSpec, reference_tsv) -> None:
    """Leave one GPU out: the constants are refitted on the other GPUs' rows and predict the held-out
    GPU's rows; pooled over the 36 rows the median |error| stays under the README's 6% (the in-sample
    figure, ~4%, is not quoted: the constants were fitted on those rows)."""
    module = _fit_script()
    rows = reference_tsv("trtllm_published_throughput.tsv")
    pooled = module.cross_validated_error(module.cross_validate(llama8b, rows, P.EFFICIENCY))
    print(f"cross-validated median |error| {pooled['median_abs_pct_error']:.1f}% over {pooled['rows']} rows, "
          f"worst {pooled['max_abs_pct_error']:.1f}%")
    assert pooled["rows"] == len(rows) >= 36
    assert pooled["median_abs_pct_error"] < CV_MEDIAN_MAX_PCT
    assert pooled["max_abs_pct_error"] < CV_WORST_MAX_PCT


def test_fit_script_writes_json_and_png(tmp_path: Path) -> None:
    module = _fit_script()
    assert module.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "plan_vs_published.json").read_text())
    assert report["median_abs_pct_error"] <= 10.0 and len(report["rows"]) >= 36
    assert (tmp_path / "plan_vs_published.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_plan_for_the_demo_model(demo_hf_dir: Path, capsys) -> None:
    assert run(["plan", "--model", str(demo_hf_dir), "--gpu", "l4", "--quant", "fp16", "--isl", "512",
                "--osl", "128", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["tied_embeddings"] is True
    assert data["model"]["params_b"] == pytest.approx(0.1345, abs=0.001)

"""`pipeline plan --slo` / `--calibrate` through the CLI: the result files, and bad input (exit 2 with what would work)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import run

from planner_cases import LLAMA_8B

BASE = ["plan", "--model", str(LLAMA_8B), "--isl", "1024", "--osl", "128", "--gpus", "h100", "--quant", "fp8", "--tp", "1"]


@pytest.fixture(autouse=True)
def _reports_outside_the_checkout(build_root: Path) -> None:
    """A search without --out writes build/<model>/reports/plan-<time>/: here, a temporary build root."""


def test_plan_slo_writes_json_and_png_and_prints_the_best_build(tmp_path: Path, capsys) -> None:
    code = run([*BASE, "--slo", "ttft_p99_ms=800,tpot_p99_ms=40", "--rate", "5", "--price", "h100=3.9", "--out", str(tmp_path), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    best = data["best_per_gpu"][0]
    assert best["gpu"] == "h100-sxm" and best["price_source"].startswith("--price") and best["replicas"] >= 1
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "pareto.png").stat().st_size > 5000


@pytest.mark.parametrize("extra, words", [
    (["--slo", "ttft_p95_ms=500"], "ttft_p99_ms"),  # an SLO key that does not exist: the keys that do
    (["--slo", "ttft_p99_ms=500", "--rate", "-3"], "--rate 20"),
    (["--slo", "ttft_p99_ms=500", "--gpus", "h900"], "h100-sxm"),
    (["--slo", "ttft_p99_ms=1,tpot_p99_ms=0.1"], "Closest:"),  # infeasible: the closest build and what it reaches
])
def test_bad_plan_input_exits_2_with_what_would_work(extra: list[str], words: str, capsys) -> None:
    args = [a for a in BASE if a not in ("--gpus", "h100")] if "--gpus" in extra else BASE
    assert run([*args, *extra]) == 2
    assert words in capsys.readouterr().err


def test_a_prices_file_without_a_source_column_exits_2(tmp_path: Path, capsys) -> None:
    prices = tmp_path / "prices.tsv"
    prices.write_text("gpu\tusd_per_gpu_hour\nh100\t3.9\n")
    assert run([*BASE, "--slo", "ttft_p99_ms=800", "--prices", str(prices)]) == 2
    err = capsys.readouterr().err
    assert "no source column" in err and "usd_per_gpu_hour and source" in err


@pytest.mark.parametrize("deployment, words", [
    ({"model": "mistral-7b", "gpu": "h100-sxm"}, "another model"),
    ({"model": "llama-3.1-8b", "gpu": "l40s"}, "another GPU"),
])
def test_a_calibration_file_from_another_model_or_gpu_exits_2(tmp_path: Path, deployment: dict, words: str, capsys) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"deployment": {**deployment, "backend": "tensorrt", "quant": "fp8", "max_batch_size": 8,
                                                "max_num_tokens": 2048, "kv_cache_free_gpu_mem_fraction": 0.9},
                                 "levels": []}))
    assert run([*BASE, "--calibrate", str(bench)]) == 2
    err = capsys.readouterr().err
    assert words in err and "pipeline bench" in err


def test_plan_names_windowed_layers_and_the_gpu_caveat(tmp_path: Path, capsys) -> None:
    """A Gemma 3 config on an RTX PRO 6000: the table says which layers are windowed and, for engines, that they attend to
    the whole context; the caveat says no fit saw the GPU (the figures are asserted in test_published.py)."""
    config = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
              "sliding_window": 1024, "sliding_window_pattern": 6, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    args = ["plan", "--model", str(tmp_path), "--gpu", "rtx-pro-6000", "--quant", "fp8", "--isl", "4096", "--osl", "512"]
    assert run([*args, "--backend", "pytorch", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["sliding_windows"] == {"1024": 29}
    assert any(c.startswith("rtx-pro-6000: no fit saw this GPU") for c in data["caveats"])
    assert run(args) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table's cells wrap: read them as one text
    assert "29 layers windowed to 1024 tokens" in out and "engines attend to the whole context" in out


def test_a_model_trtllm_build_cannot_build_is_not_planned_as_an_engine(capsys) -> None:
    """GPT-OSS has no model class in TensorRT-LLM's TensorRT flow: an engine plan (one configuration or --slo) exits 2
    pointing to the PyTorch backend, which plans it; the CPU's reference runtime is not trtllm-build."""
    gpt_oss = str(Path(__file__).resolve().parents[3] / "pipeline" / "data" / "published_models" / "gpt-oss-20b.json")
    assert run(["plan", "--model", gpt_oss, "--gpu", "h100", "--isl", "1024", "--osl", "128"]) == 2
    err = capsys.readouterr().err
    assert "no model class for GptOssForCausalLM" in err and "--backend pytorch" in err
    assert run(["plan", "--model", gpt_oss, "--gpu", "h100", "--isl", "1024", "--osl", "128", "--backend", "pytorch"]) == 0
    capsys.readouterr()
    assert run(["plan", "--model", gpt_oss, "--isl", "1024", "--osl", "128", "--gpus", "h100,h200", "--slo", "tpot_p99_ms=50"]) == 2
    assert "no model class for GptOssForCausalLM" in capsys.readouterr().err


def test_plan_prints_the_trtllm_bench_prediction(capsys) -> None:
    args = ["plan", "--model", str(LLAMA_8B), "--gpu", "h100", "--quant", "fp8", "--isl", "128", "--osl", "2048",
            "--trtllm-bench-requests", "3000"]
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "trtllm-bench" in out and "3,000" in out  # the table's row (rich wraps its text to the terminal)
    assert run([*args, "--json"]) == 0
    bench = json.loads(capsys.readouterr().out)["trtllm_bench"]
    assert bench["requests"] == 3000 and bench["output_tokens_per_s"] > 0 and bench["kv_cache_free_gpu_mem_fraction"] == 0.9
    assert run([*BASE, "--slo", "tpot_p99_ms=50", "--trtllm-bench-requests", "3000"]) == 2
    assert "one configuration" in capsys.readouterr().err


def test_plan_with_pipeline_stages_and_its_refusals(tmp_path: Path, capsys) -> None:
    """--pp: one configuration's memory per stage GPU, limits per micro-batch and figures per GPU of all tp x pp; the SLO
    search takes a list of depths and prices every GPU of a build; what cannot be split so exits 2 with what would work."""
    one = ["plan", "--model", str(LLAMA_8B), "--isl", "1024", "--osl", "256", "--gpu", "l40s", "--quant", "fp8",
           "--trtllm-bench-requests", "3000", "--json"]
    assert run(one) == 0
    single = json.loads(capsys.readouterr().out)
    assert run([*one, "--pp", "2"]) == 0
    staged = json.loads(capsys.readouterr().out)
    assert staged["pp"] == 2 and single["pp"] == 1
    assert any(c.startswith("pipeline stages:") for c in staged["caveats"]) and not any(
        c.startswith("pipeline stages:") for c in single["caveats"])
    assert staged["memory"]["kv_bytes_per_token"] == single["memory"]["kv_bytes_per_token"] / 2
    assert staged["memory"]["max_sequences"] > 2 * single["memory"]["max_sequences"]
    bench = staged["trtllm_bench"]
    assert bench["output_tokens_per_s_per_gpu"] == pytest.approx(bench["output_tokens_per_s"] / 2, abs=0.01)
    search = [*BASE[:-2], "--slo", "ttft_p99_ms=2000,tpot_p99_ms=60", "--price", "h100=3.9", "--out", str(tmp_path), "--json"]
    assert run([*search, "--pp", "1,2"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert run([*search, "--pp", "2"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert both["candidates"] > found["candidates"] > 0 and found["feasible"] > 0
    assert any(c.startswith("pipeline stages:") for c in found["caveats"])
    for c in found["pareto"] + found["best_per_gpu"]:  # counted and priced per GPU of both stages
        assert c["pp"] == 2 and c["tokens_per_s_per_gpu"] == pytest.approx(c["latency"]["output_tokens_per_s"] / (2 * c["tp"]), abs=0.01)
        assert c["usd_per_hour"] == pytest.approx(3.9 * 2 * c["tp"], abs=1e-3)
    for extra, words in ((["--pp", "0"], "positive integers"), (["--pp", "33"], "32 decoder layers"),
                         (["--pp", "2", "--speculative-acceptance", "0.7"], "pipeline parallelism"),
                         (["--pp", "1,2"], "one size for one configuration")):
        assert run([*one[:-1], *extra]) == 2, extra
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, (extra, err)
    assert run(["plan", "--model", str(LLAMA_8B), "--gpu", "cpu", "--pp", "2"]) == 2
    assert "tp and pp must be 1" in capsys.readouterr().err

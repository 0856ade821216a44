"""evaluate on the demo model (SmolLM2-135M): real scoring, real ModelOpt fake quantization, the gate's exit codes.

A few evaluation texts only, to keep each test to seconds of model time on two CPU cores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.evaluate import evaluate
from pipeline.evaluate.scoring import load_eval_texts, score_model, token_windows
from pipeline.evaluate.spec import EvaluateSpec
from pipeline.quantization.simulated import BASELINE_DTYPE, Variant, count_kv_quantizer_calls, simulated_model

pytestmark = pytest.mark.slow

TEXTS = 4


@pytest.fixture(scope="module")
def baseline(demo_hf_dir: Path):
    from pipeline.quantization.modelopt import load_hf_model

    model, tokenizer = load_hf_model(demo_hf_dir, BASELINE_DTYPE)
    windows = token_windows(tokenizer, load_eval_texts()[:TEXTS], 512)
    score, predictions = score_model(model, windows, batch_size=4, pad_id=tokenizer.pad_token_id)
    return {"model": model, "tokenizer": tokenizer, "windows": windows, "score": score, "predictions": predictions}


def test_baseline_perplexity_is_sane_and_agrees_with_itself(baseline):
    score = baseline["score"]
    assert math.isfinite(score.perplexity) and 2.0 < score.perplexity < 200.0
    assert score.tokens == sum(len(w) - 1 for w in baseline["windows"])
    assert 0.1 < score.top1_accuracy < 0.9
    # a second run, scored against the first one's predictions, one window per batch (no padding)
    again, _ = score_model(baseline["model"], baseline["windows"], reference=baseline["predictions"], batch_size=1)
    assert again.top1_agreement == 1.0
    assert again.perplexity == pytest.approx(score.perplexity, rel=1e-4)  # padding changed nothing


def test_int4_raises_perplexity_and_changes_predictions(baseline, demo_hf_dir: Path):
    model, _ = simulated_model(demo_hf_dir, Variant(quant="int4_wo"))
    score, _ = score_model(model, baseline["windows"], reference=baseline["predictions"])
    assert score.perplexity > baseline["score"].perplexity * 1.01
    assert score.top1_agreement < 0.99


def test_fp8_kv_cache_quantizers_run_also_under_continuous_batching(demo_hf_dir: Path):
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from pipeline.quantization.simulated import load_reference_model

    model, tokenizer = load_reference_model(demo_hf_dir, "fp8", "fp8", calib_texts=load_eval_texts()[-4:])
    prompts = [tokenizer("The capital of France is")["input_ids"], tokenizer("def add(a, b):")["input_ids"]]
    # A paged cache of 16 blocks x 32 tokens holds both requests. With the cache transformers sizes for itself,
    # generate_batch took 42 s here (1.9 s with this one, the same tokens).
    cache = ContinuousBatchingConfig(num_blocks=16, page_size=32, max_batch_tokens=256)
    with count_kv_quantizer_calls(model) as counts:
        outputs = model.generate_batch(
            inputs=prompts, generation_config=GenerationConfig(max_new_tokens=4, do_sample=False, eos_token_id=-1),
            continuous_batching_config=cache,
        )
    assert counts["quantizers"] == 2 * model.config.num_hidden_layers
    assert counts["calls"] > 0
    assert all(len(out.generated_tokens) == 4 for out in outputs.values())


def test_gate_exit_codes_reports_and_cache(demo_hf_dir: Path, tmp_path: Path, capsys):
    common = ["evaluate", "--model", str(demo_hf_dir), "--quant", "int4_wo", "--quant", "fp16",
              "--max-texts", "2", "--out", str(tmp_path)]
    assert run([*common, "--max-delta", "0.0001"]) == 4
    captured = capsys.readouterr()
    assert "Accuracy gate failed" in captured.err and "int4_wo" in captured.err
    folders = list(tmp_path.glob("evaluate-*"))
    assert len(folders) == 1
    assert {p.name for p in folders[0].iterdir()} >= {"evaluate.json", "evaluate.csv", "evaluate.md", "evaluate.png", "manifest.json"}

    assert run([*common, "--max-delta", "100", "--json"]) == 0  # same inputs: the stored figures, re-gated
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["cached"] is True and data["passed"] is True and data["max_delta"] == 100
    rows = {row["name"]: row for row in data["formats"]}
    assert rows["int4_wo"]["delta"] > 0.01 and abs(rows["fp16"]["delta"]) < 0.01
    assert rows["fp16"]["kv_measured"] is None


def test_kv_cache_rows_say_whether_the_kv_quantizers_ran(demo_hf_dir: Path, tmp_path: Path):
    spec = EvaluateSpec.from_formats(str(demo_hf_dir), ["fp8"], "fp8", max_texts=2, calib_size=4, out=tmp_path)
    result = evaluate(spec)
    (row,) = result.formats
    assert row.name == "fp8+kv_fp8" and row.kv_measured is True and row.kv_quantizer_calls > 0
    assert math.isfinite(row.perplexity) and row.delta < 1.0
    assert 0.0 < row.top1_agreement <= 1.0

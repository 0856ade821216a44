"""The evaluate stage without a model: stored figures reused with the gate re-applied, and the CLI's
refusals before anything loads. Measuring a real model is tests/unit/evaluate/test_model.py."""

from __future__ import annotations

from pathlib import Path

from pipeline.cli import run


def test_cli_refuses_bad_inputs_before_loading_anything(tmp_path: Path, capsys):
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8"]) == 2  # no config.json
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp9"]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--kv-cache", "int3"]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--max-delta", "-1"]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--data", str(tmp_path / "no.txt")]) == 2
    capsys.readouterr()
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--record-in", str(tmp_path / "ckpt")]) == 2
    # config.json {} would exit 2 anyway: the refusal must be --record-in's, a folder without a manifest
    assert f"{tmp_path / 'ckpt'} has no readable manifest.json." in capsys.readouterr().err


def test_same_inputs_again_reuse_the_stored_figures_with_this_gate(tmp_path: Path, monkeypatch):
    """A second run with the same checkpoint, data and formats loads no model: the stored figures come
    back marked cached, with the gate re-applied at this run's --max-delta."""
    import time

    import pipeline.evaluate
    from evaluate_fixtures import sample_result
    from pipeline.core.artifacts import sha256_json
    from pipeline.evaluate import evaluate
    from pipeline.evaluate.scoring import EVAL_DATA
    from pipeline.evaluate.spec import EvaluateSpec
    from pipeline.evaluate.cache import evaluation_inputs, report_dir_for, store_result
    from pipeline.quantization.simulated import calibration_texts

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}", encoding="utf-8")
    spec = EvaluateSpec.from_formats(str(hf), ["fp8"], out=tmp_path / "reports", max_delta=0.3, calib_size=2)
    inputs = evaluation_inputs(spec, hf.resolve(), EVAL_DATA, calibration_texts(2, None))
    report_dir = report_dir_for(spec, "m", sha256_json(inputs))
    stored = sample_result(report_dir).model_copy(update={"inputs_hash": sha256_json(inputs)})
    store_result(stored, inputs, time.time())

    def no_model(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(pipeline.evaluate, "_measure", no_model)
    result = evaluate(spec)
    assert result.cached and result.report_dir == report_dir
    assert result.max_delta == 0.3 and result.failed == ("nvfp4",)  # int4_awq's +25% passes at 0.3
    assert evaluate(spec.model_copy(update={"max_delta": 0.1})).failed == ("int4_awq", "nvfp4")

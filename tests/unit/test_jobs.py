"""`pipeline engine` (what `make engine` runs): refusals before any work, and the dry-run chain."""

from __future__ import annotations

import pytest

from pipeline.cli import run


def test_engine_refuses_impossible_precision_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["engine", "demo", "--gpu", "a100", "--quant", "fp8"]) == 2
    err = capsys.readouterr().err
    assert "a100-80gb (SM 8.0) cannot run fp8" in err and "int8_sq" in err
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or converted


def test_engine_refuses_unknown_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["engine", "demo", "--gpu", "v100"]) == 2
    assert "Unknown GPU 'v100'" in capsys.readouterr().err


@pytest.mark.slow
def test_engine_dry_run_chains_download_convert_and_the_build_plan(demo_hf_dir, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(demo_hf_dir.parents[1]))
    assert run(["engine", f"local:{demo_hf_dir}", "--gpu", "h100", "--quant", "fp16", "--goal", "latency",
                "--dry-run", "--json"]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    names = [step["name"] for step in result["steps"]]
    assert names == ["download", "convert", "build (dry run)"]
    command = result["steps"][-1]["detail"]
    assert command.startswith("trtllm-build ") and "--checkpoint_dir" in command and "/checkpoints/fp16-tp1-" in command
    assert result["repo"] is None

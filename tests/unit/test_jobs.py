"""`pipeline engine` (what `make engine` runs): refusals before any work, and the dry-run chain."""

from __future__ import annotations

import pytest

from pipeline.cli import run
from pipeline.errors import InvalidInputError


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
    # local:build/<model>/hf names the model <model>, not "hf": the download artifact is used in place
    root = demo_hf_dir.parents[1]
    assert result["steps"][0]["artifact"] == str(demo_hf_dir) and result["steps"][0]["detail"] == "reused"
    assert result["steps"][1]["artifact"].startswith(str(root / demo_hf_dir.parent.name / "checkpoints"))
    assert not (root / "hf").exists()


def test_a_download_folder_is_used_in_place_under_its_model_name(tiny_ckpt, build_root) -> None:
    """`pipeline engine local:build/<model>/hf` (what a user types after `pipeline download`) names the
    model <model>: the folder is reused, not copied to build/hf/hf."""
    from pipeline.download import DownloadSpec, download
    from pipeline.jobs import fetch_model

    first = download(DownloadSpec(source=f"local:{tiny_ckpt}"))
    assert first.path == build_root.resolve() / first.model / "hf"
    for source in (f"local:{first.path}", str(first.path)):
        fetched = fetch_model(source, None)
        assert (fetched.model, fetched.path, fetched.skipped) == (first.model, first.path, True)
        assert fetched.bytes == first.bytes
    assert sorted(p.name for p in build_root.iterdir()) == [first.model]
    (first.path / "config.json").write_text("{}")  # damaged: refused with what to do, never used
    with pytest.raises(InvalidInputError, match="no longer matches its manifest"):
        fetch_model(f"local:{first.path}", None)

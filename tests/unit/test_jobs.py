"""pipeline.jobs: `pipeline engine` (what `make engine` runs): refusals before any work, and the dry-run
chain; the evaluation job: its figures recorded in a checkpoint's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluate_fixtures import sample_result as _result
from pipeline.core.artifacts import ArtifactOrigin, build_manifest, read_manifest, sha256_json, write_json_atomic
from pipeline.cli import run
from pipeline.core.errors import InvalidInputError
from pipeline.jobs import record_in_manifest
from pipeline.core.reporting import RecordingReporter


def test_engine_refuses_impossible_precision_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["engine", "demo", "--gpu", "a100", "--quant", "fp8"]) == 2
    err = capsys.readouterr().err
    assert "a100-80gb (SM 8.0) cannot run fp8" in err and "int8_sq" in err
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or converted


def test_engine_refuses_awq_on_blackwell_for_the_pytorch_backend_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["engine", "demo", "--gpu", "b200", "--quant", "int4_awq", "--backend", "pytorch"]) == 2
    err = capsys.readouterr().err
    assert "does not support int4_awq weights on Blackwell(sm100/103) (b200" in err and "nvfp4" in err
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or converted


def test_engine_refuses_unknown_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["engine", "demo", "--gpu", "v100"]) == 2
    assert "Unknown GPU 'v100'" in capsys.readouterr().err


def test_engine_dry_run_plans_from_config_json_alone(tmp_path, monkeypatch, capsys):
    """DRY_RUN=1 works on any machine: a folder with a config.json and no weights gets the exact trtllm-build command
    (exit 0), nothing is downloaded or converted, and no checkpoint is left (it downloaded and converted before)."""
    import shutil

    model = tmp_path / "llama-3.1-8b"
    model.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "llama-3.1-8b" / "config.json", model)
    root = tmp_path / "build"
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(root))
    assert run(["engine", f"local:{model}", "--gpu", "h100", "--quant", "fp8", "--goal", "latency", "--dry-run", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [step["name"] for step in result["steps"]] == ["config.json", "build (dry run)"]
    command = result["steps"][-1]["detail"]
    assert command.startswith("trtllm-build --checkpoint_dir") and "/llama-3.1-8b/checkpoints/<checkpoint-id>" in command
    assert "--use_fp8_context_fmha" in command and result["repo"] is None and result["engine_dir"] is None
    assert not root.exists()  # no hf/, no checkpoints/, no engines/
    assert run(["engine", f"local:{model}", "--gpu", "h100", "--quant", "fp8", "--backend", "pytorch", "--dry-run",
                "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"][-1]["detail"].startswith("torch-h100-sxm-fp8-tp1-throughput:")
    # pipeline stages of the PyTorch backend go to its build (the LLM API splits at load time), not to convert
    assert run(["engine", f"local:{model}", "--gpu", "l40s", "--quant", "fp8", "--backend", "pytorch", "--pp", "2",
                "--dry-run", "--json"]) == 0
    detail = json.loads(capsys.readouterr().out)["steps"][-1]["detail"]
    assert detail.startswith("torch-l40s-fp8-tp1-pp2-throughput:"), detail
    assert not root.exists()
    assert run(["engine", f"local:{tmp_path / 'empty'}", "--gpu", "h100", "--dry-run"]) == 2  # no such folder


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


def test_record_in_manifest_keeps_the_checkpoint_up_to_date(tmp_path: Path):
    import time

    from pipeline.core.artifacts import is_up_to_date

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}", encoding="utf-8")
    inputs_hash = sha256_json({"x": 1})
    calibration = {"sha256": "c" * 64, "size": 8}
    write_json_atomic(ckpt / "manifest.json", build_manifest(ArtifactOrigin("convert", {"x": 1}, inputs_hash), ckpt, time.time(),
                                                             extra={"calibration": calibration}))
    result = _result(tmp_path)
    assert record_in_manifest(ckpt, result)["calibration_matches_checkpoint"] is False
    result = result.model_copy(update={"dataset": {**result.dataset, "calibration_sha256": "c" * 64}})
    record = record_in_manifest(ckpt, result)
    assert record["calibration_matches_checkpoint"] is True
    manifest = read_manifest(ckpt)
    assert manifest["evaluation"] == json.loads(json.dumps(record))
    assert manifest["evaluation"]["formats"]["int4_awq"]["passed"] is False
    assert manifest["evaluation"]["baseline"]["perplexity"] == 10.0
    assert is_up_to_date(ckpt, inputs_hash)
    with pytest.raises(InvalidInputError, match="no readable manifest.json"):
        record_in_manifest(tmp_path / "nowhere", _result(tmp_path))


def test_evaluation_refuses_a_folder_without_a_manifest_before_measuring(tmp_path: Path, monkeypatch):
    import pipeline.jobs
    from pipeline.evaluate.spec import EvaluateSpec
    from pipeline.jobs import run_evaluation

    monkeypatch.setattr(pipeline.jobs, "evaluate", lambda *args: pytest.fail("evaluated before the refusal"))
    with pytest.raises(InvalidInputError, match="no readable manifest.json"):
        run_evaluation(EvaluateSpec.from_formats("m", ["fp8"]), record_in=tmp_path / "nowhere")


def test_evaluation_records_pass_or_fail_and_says_so(tmp_path: Path, monkeypatch):
    import time

    import pipeline.jobs
    from pipeline.evaluate.spec import EvaluateSpec
    from pipeline.jobs import run_evaluation

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_json_atomic(ckpt / "manifest.json", build_manifest(ArtifactOrigin("convert", {}, "x"), ckpt, time.time()))
    failing = _result(tmp_path)
    monkeypatch.setattr(pipeline.jobs, "evaluate", lambda spec, reporter: failing)

    heard = RecordingReporter()
    result = run_evaluation(EvaluateSpec.from_formats("m", ["fp8"]), record_in=ckpt, reporter=heard)
    assert result is failing and not result.passed  # the gate is the caller's: no raise here
    assert read_manifest(ckpt)["evaluation"]["failed"] == ["int4_awq", "nvfp4"]
    assert heard.events == [("info", f"recorded the figures in {ckpt / 'manifest.json'}")]


@pytest.mark.slow
def test_engine_with_the_pytorch_backend_chains_convert_hf_the_deployable_and_its_llmapi_repository(
        demo_hf_dir, monkeypatch, capsys):
    """`pipeline engine --backend pytorch` (make engine BACKEND=pytorch): the LLM-API options for a GPU (dry run,
    from config.json), and on the CPU convert --format hf, the deployable and its Triton LLM-API repository."""
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(demo_hf_dir.parents[1]))
    common = ["engine", f"local:{demo_hf_dir}", "--quant", "fp16", "--goal", "latency", "--backend", "pytorch", "--json"]
    assert run([*common, "--gpu", "h100", "--dry-run"]) == 0
    planned = json.loads(capsys.readouterr().out)
    # a dry run plans from config.json alone: nothing downloaded or converted (test_engine_dry_run_plans_...)
    assert [step["name"] for step in planned["steps"]] == ["config.json", "build (dry run)"]
    assert planned["steps"][1]["detail"].startswith("torch-h100") and "max_batch_size" in planned["steps"][1]["detail"]

    assert run([*common, "--gpu", "cpu"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert [step["name"] for step in built["steps"]] == ["download", "convert", "build", "render"]
    assert "/checkpoints/hf-fp16-" in built["steps"][1]["artifact"]
    deployable = Path(built["engine_dir"])
    assert (deployable / "llm_api_options.yaml").is_file() and (deployable / "model" / "config.json").is_file()
    repo = Path(built["repo"])
    assert (repo / "tensorrt_llm" / "config.pbtxt").is_file() and (repo / "tensorrt_llm" / "1" / "model.yaml").is_file()
    assert not (repo / "ensemble").exists()  # NVIDIA's LLM-API layout: the one tensorrt_llm model


def test_engine_refuses_an_unknown_backend_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["engine", "demo", "--gpu", "h100", "--quant", "fp8", "--backend", "onnx"]) == 2
    assert "backend" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_engine_passes_its_adapters_to_the_build(tmp_path, monkeypatch, capsys):
    """`pipeline engine --lora NAME=PATH` (make engine LORA="NAME=PATH ..."): the build it plans serves the adapter
    (trtllm-build's LoRA flags; the PyTorch deployable's "-lora" profile), and a bad adapter is refused before any work."""
    from lora_cases import ATTENTION, make_adapter, tiny_llama

    base = tiny_llama(tmp_path / "tiny-llama")
    adapter = make_adapter(base, tmp_path / "sql", rank=8, targets=ATTENTION)
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    common = ["engine", f"local:{base}", "--gpu", "h100", "--quant", "fp16", "--dry-run", "--json"]
    assert run([*common, "--lora", f"sql={adapter}"]) == 0
    command = json.loads(capsys.readouterr().out)["steps"][-1]["detail"]
    assert "--lora_plugin" in command and "--lora_dir" in command and "--max_lora_rank 8" in command
    assert run([*common, "--backend", "pytorch", "--lora", f"sql={adapter}"]) == 0
    assert "-lora:" in json.loads(capsys.readouterr().out)["steps"][-1]["detail"]  # the profile of a build with adapters
    assert run([*common, "--lora", f"sql={tmp_path / 'none'}"]) == 2
    assert not (tmp_path / "build").exists()

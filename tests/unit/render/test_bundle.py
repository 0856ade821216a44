"""Bundles: `pipeline render --model-root ROOT` writes the five models, the engine (hard-linked, else
copied) and the tokenizer, every config path under ROOT; bad input is refused with nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.render.bundle import check_location, path_problems
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.render.model_repo import parse_model_config
from pipeline.build.reference_folder import write_reference_engine_dir
from pipeline.render import MODELS, RenderSpec, render


def _engine(root: Path, runtime: str = "reference") -> Path:
    """A reference engine folder from a tiny fake HF checkpoint, or a trtllm-build-style one with its tokenizer."""
    hf = root / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    for name, text in (("config.json", '{"model_type": "llama"}'), ("tokenizer.json", "{}"), ("tokenizer_config.json", "{}")):
        (hf / name).write_text(text)
    (hf / "model.safetensors").write_bytes(b"\1" * 4096)
    engine = root / "build" / "demo" / "engines" / runtime
    if runtime == "reference":
        return write_reference_engine_dir(hf, engine, {"max_batch_size": 2, "max_input_len": 32, "max_seq_len": 64})
    engine.mkdir(parents=True)
    (engine / "config.json").write_text(json.dumps({"version": "1.1.0", "build_config": {"max_batch_size": 4}}))
    (engine / "rank0.engine").write_bytes(b"\2" * 8192)
    shutil.copytree(hf, engine / "tokenizer", ignore=shutil.ignore_patterns("*.safetensors", "config.json"))
    return engine


def _paths(repo: Path) -> dict[str, str]:
    """model/key -> every parameter value that is an absolute path."""
    found = {}
    for model in MODELS:
        for key, value in parse_model_config(repo / model / "config.pbtxt").parameters.items():
            if value.string_value.startswith("/"):
                found[f"{model}/{key}"] = value.string_value
    return found


@pytest.mark.parametrize("runtime", ["reference", "tensorrtllm"])
def test_bundle_holds_models_engine_and_tokenizer_under_its_root(tmp_path: Path, runtime: str) -> None:
    engine = _engine(tmp_path, runtime)
    root = Path("/models")
    result = render(RenderSpec(engine=engine, out=tmp_path / "bundle", model_root=root))
    bundle = result.repo
    assert result.model_root == root and result.checks["paths"].startswith("every path")
    assert sorted(p.name for p in bundle.iterdir() if p.is_dir()) == sorted(MODELS)
    for path in engine.rglob("*"):  # every engine file is in the bundle, as a hard link (same filesystem)
        if path.is_file():
            inside = bundle / "tensorrt_llm" / "1" / path.relative_to(engine)
            assert inside.is_file() and os.path.samefile(inside, path), inside
    assert result.bundle["linked_files"] == sum(1 for p in engine.rglob("*") if p.is_file()) and result.bundle["copied_files"] == 0
    paths = _paths(bundle)
    assert paths["tensorrt_llm/gpt_model_path"] == "/models/tensorrt_llm/1"
    assert paths["preprocessing/tokenizer_dir"] == paths["postprocessing/tokenizer_dir"] == "/models/tensorrt_llm/1/tokenizer"
    for where, value in paths.items():
        if not where.endswith("executor_worker_path"):  # a path of the serving image (bundle.IMAGE_PATH_KEYS)
            assert value.startswith("/models/") and (bundle / Path(value).relative_to(root)).exists(), where
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["bundle"]["model_root"] == "/models" and "tensorrt_llm/1/config.json" in manifest["files"]


def test_default_root_is_the_bundle_itself_and_same_inputs_are_a_no_op(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    first = render(RenderSpec(engine=engine))
    assert first.model_root == first.repo == tmp_path / "build" / "demo" / "triton" / "reference"
    assert _paths(first.repo)["tensorrt_llm/gpt_model_path"] == str(first.repo / "tensorrt_llm" / "1")
    stamp = (first.repo / "manifest.json").stat().st_mtime_ns
    again = render(RenderSpec(engine=engine))
    assert again.reused and (first.repo / "manifest.json").stat().st_mtime_ns == stamp
    assert again.bundle == first.bundle
    moved = render(RenderSpec(engine=engine, model_root=tmp_path / "elsewhere"))
    assert not moved.reused and _paths(moved.repo)["tensorrt_llm/gpt_model_path"] == str(tmp_path / "elsewhere/tensorrt_llm/1")
    (engine / "model" / "model.safetensors").write_bytes(b"\3" * 100)  # a changed engine is not the same input
    assert not render(RenderSpec(engine=engine, model_root=tmp_path / "elsewhere")).reused


def test_engine_files_are_copied_across_filesystems(tmp_path: Path) -> None:
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (/dev/shm) to render onto")
    engine = _engine(tmp_path)
    out = Path("/dev/shm") / f"bundle-test-{os.getpid()}"
    try:
        result = render(RenderSpec(engine=engine, out=out))
        assert result.bundle["linked_files"] == 0 and result.bundle["copied_files"] > 0
        copied = out / "tensorrt_llm" / "1" / "model" / "model.safetensors"
        assert copied.read_bytes() == (engine / "model" / "model.safetensors").read_bytes()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_outside_tokenizer_brings_only_tokenizer_files(tmp_path: Path) -> None:
    engine = _engine(tmp_path, "tensorrtllm")
    shutil.rmtree(engine / "tokenizer")
    with pytest.raises(InvalidInputError, match="--tokenizer"):
        render(RenderSpec(engine=engine, out=tmp_path / "bundle"))
    result = render(RenderSpec(engine=engine, out=tmp_path / "bundle", tokenizer=tmp_path / "hf"))
    tokenizer = result.repo / "tensorrt_llm" / "1" / "tokenizer"
    assert sorted(p.name for p in tokenizer.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]  # no weights


@pytest.mark.parametrize("case", ["relative root", "no tokenizer", "out inside engine", "out is engine", "out holds engine"])
def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, case: str, capsys) -> None:
    engine = _engine(tmp_path, "tensorrtllm")
    out = tmp_path / "bundle"
    args = ["render", "--engine", str(engine), "--out", str(out)]
    if case == "relative root":
        args += ["--model-root", "models"]
    elif case == "no tokenizer":
        shutil.rmtree(engine / "tokenizer")
    elif case == "out inside engine":
        out = engine / "triton"
        args[-1] = str(out)
    elif case == "out is engine":
        out = engine
        args[-1] = str(out)
    else:
        out = tmp_path / "build"
        args[-1] = str(out)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert {"relative root": "relative", "no tokenizer": "--tokenizer", "out inside engine": "inside the engine",
            "out is engine": "inside the engine", "out holds engine": "contains the engine"}[case] in err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written, nothing removed


def test_path_check_catches_a_path_outside_the_bundle(tmp_path: Path) -> None:
    result = render(RenderSpec(engine=_engine(tmp_path), out=tmp_path / "bundle"))
    assert path_problems(result.repo, result.model_root) == []
    config = result.repo / "postprocessing" / "config.pbtxt"
    config.write_text(config.read_text().replace(str(result.repo / "tensorrt_llm/1/tokenizer"), str(tmp_path / "hf")))
    assert any("outside the bundle root" in p for p in path_problems(result.repo, result.model_root))
    config.write_text(config.read_text().replace(str(tmp_path / "hf"), str(result.repo / "nothing-here")))
    assert any("names nothing in the bundle" in p for p in path_problems(result.repo, result.model_root))


def test_serve_refuses_a_bundle_away_from_its_root(tmp_path: Path, capsys) -> None:
    result = render(RenderSpec(engine=_engine(tmp_path), out=tmp_path / "bundle"))
    check_location(result.repo)  # where it was rendered for: fine
    moved = tmp_path / "moved"
    shutil.move(str(result.repo), str(moved))
    with pytest.raises(InvalidInputError, match=str(result.repo)):
        check_location(moved)
    assert cli.run(["serve", str(moved), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"rendered for {result.repo}" in err and "--model-root" in err


def test_missing_contract_tables_are_an_error_not_a_skip(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PIPELINE_REFERENCE_DIR", str(tmp_path / "empty"))
    out = tmp_path / "bundle"
    with pytest.raises(StageFailedError, match="contract tables"):
        render(RenderSpec(engine=_engine(tmp_path), out=out))
    assert not out.exists()

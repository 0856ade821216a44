"""Build profiles: ids and names, `pipeline profiles`, and the engine compatibility check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.build.catalog import Machine, list_profiles
from pipeline.build.profiles import BuildProfile, check_engine_compatible

LLAMA = Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b"


def _row(rows, gpu, quant, backend="tensorrt"):
    return next(r for r in rows if r.gpu == gpu and r.quant == quant and r.backend == backend)


def test_profile_id_is_a_content_hash_and_name_is_readable():
    base = BuildProfile(model="m", model_revision="r1", runtime="tensorrtllm", gpu="h100-sxm", compute_capability="9.0",
                        quant="fp8", kv_cache="fp8", goal="throughput")
    assert base.name == "trtllm-h100-sxm-fp8-kvfp8-tp1-throughput"
    assert len(base.id) == 12 and base.id == BuildProfile(**base.model_dump()).id
    assert base.model_copy(update={"max_batch_size": 9}).id != base.id
    assert base.model_copy(update={"trtllm_version": "1.0.0"}).id != base.id


def test_llama_8b_profiles_per_gpu_and_precision():
    rows = list_profiles(LLAMA)
    assert _row(rows, "h100-sxm", "fp8").status == "runnable"
    a100_fp8 = _row(rows, "a100-80gb", "fp8")
    assert a100_fp8.status == "incompatible" and "SM 8.9" in a100_fp8.reason and "int8_sq" in a100_fp8.fix
    assert _row(rows, "b200", "int8_sq").status == "incompatible"
    assert _row(rows, "b200", "nvfp4").status == "runnable"
    assert _row(rows, "l4", "nvfp4").status == "incompatible"
    assert {r.gpu for r in rows} >= {"a100-40gb", "h100-sxm", "l40s", "b200", "cpu"}
    cpu = [r for r in rows if r.gpu == "cpu"]
    assert [(r.backend, r.name) for r in cpu] == [("tensorrt", "ref-cpu-fp16-tp1-throughput"),
                                                   ("pytorch", "ref-cpu-fp16-tp1-throughput-torch")]


def test_both_backends_listed_with_why_not_here(tmp_path):

    rows = list_profiles(LLAMA, gpus=["h100", "b200", "cpu"], machine=Machine(gpu="cpu"))
    for gpu in ("h100-sxm", "b200"):
        assert {r.backend for r in rows if r.gpu == gpu} == {"tensorrt", "pytorch"}
    torch_fp8 = _row(rows, "h100-sxm", "fp8", "pytorch")
    assert torch_fp8.status == "runnable" and torch_fp8.name == "torch-h100-sxm-fp8-tp1-throughput"
    assert torch_fp8.here == "no GPU here" and "--format hf" in torch_fp8.needs
    assert _row(rows, "h100-sxm", "bf16", "pytorch").needs == ""  # the bf16 HF folder loads as it is
    assert "TensorRT-LLM checkpoint" in _row(rows, "h100-sxm", "bf16").needs
    sq = _row(rows, "h100-sxm", "int8_sq", "pytorch")
    assert sq.status == "incompatible" and "PyTorch-backend path" in sq.reason
    # TensorRT-LLM 1.1.0's quantization hardware matrix: no AWQ on Blackwell for the PyTorch backend either
    assert _row(rows, "b200", "int4_awq").status == "incompatible"
    for quant in ("int4_awq", "w4a8_awq"):
        awq = _row(rows, "b200", quant, "pytorch")
        assert awq.status == "incompatible" and "Blackwell(sm100/103)" in awq.reason
    assert _row(rows, "h100-sxm", "int4_awq", "pytorch").status == "runnable"
    assert _row(rows, "b200", "nvfp4", "pytorch").status == "runnable"
    assert all(r.here == "" for r in rows if r.gpu == "cpu")
    here = Machine(gpu="h100-sxm", trtllm_build=False, tensorrt_llm=True)
    assert here.why_not("h100-sxm", "pytorch") == "" and "trtllm-build" in here.why_not("h100-sxm", "tensorrt")
    assert "h100-sxm" in here.why_not("b200", "pytorch")


def test_big_model_needs_tp_or_is_incompatible(tmp_path):
    big = tmp_path / "llama-70b"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    rows = list_profiles(big, gpus=["l40s", "h200"])
    fp16 = _row(rows, "l40s", "fp16")
    assert fp16.status == "runnable" and fp16.tp == 4 and "--tp 4" in fp16.fix and fp16.name.endswith("-tp4-throughput")
    assert _row(rows, "h200", "fp8").tp == 1


def test_profiles_cli_json_and_auto(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["profiles", "--model", str(LLAMA), "--gpu", "h100", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["gpu"] for r in rows} == {"h100-sxm"} and {r["status"] for r in rows} >= {"runnable", "incompatible"}
    assert run(["profiles", "--model", str(LLAMA), "--gpu", "auto", "--json"]) == 0  # no GPU here: the CPU
    assert {r["gpu"] for r in json.loads(capsys.readouterr().out)} == {"cpu"}
    assert run(["profiles", "--model", "no-such-model"]) == 2
    assert run(["profiles", "--model", str(LLAMA), "--gpu", "h100", "--backend", "pytorch", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["backend"] for r in rows} == {"pytorch"} and all(r["name"].startswith("torch-h100-sxm-") for r in rows)
    assert run(["profiles", "--model", str(LLAMA), "--backend", "onnx"]) == 2


def _engine(folder: Path, built_with: str | None = None, **profile) -> Path:
    folder.mkdir(parents=True)
    built = BuildProfile(model="m", model_revision="r", runtime="tensorrtllm", gpu="h100-sxm", compute_capability="9.0",
                         quant="fp8", **profile)
    (folder / "config.json").write_text(json.dumps({"version": built_with or built.trtllm_version, "build_config": {}}))
    (folder / "manifest.json").write_text(json.dumps({"profile": built.model_dump(mode="json")}))
    return folder


def test_engine_compatibility(tmp_path):
    engine = _engine(tmp_path / "e1")
    assert check_engine_compatible(engine, "h100-sxm", "1.1.0").gpu == "h100-sxm"
    assert check_engine_compatible(engine, "h200").quant == "fp8"  # same SM 9.0, pinned version
    with pytest.raises(UnsupportedError) as other_gpu:
        check_engine_compatible(engine, "a100")
    assert "h100-sxm (SM 9.0" in str(other_gpu.value) and "a100-80gb (SM 8.0" in str(other_gpu.value)
    with pytest.raises(UnsupportedError, match=r"TensorRT-LLM 1.1.0 \(its config.json\); this environment has 1.2.0"):
        check_engine_compatible(engine, "h100-sxm", "1.2.0")
    with pytest.raises(UnsupportedError, match="no NVIDIA GPU|there is none here"):
        check_engine_compatible(engine, "cpu")
    with pytest.raises(InvalidInputError):
        check_engine_compatible(tmp_path / "nothing", "h100")


def test_reference_engine_runs_anywhere(tmp_path):
    folder = tmp_path / "ref"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"version": "reference", "runtime": "reference", "build_config": {}}))
    assert check_engine_compatible(folder, "cpu", "9.9.9") is None
    assert check_engine_compatible(folder, "a100") is None


def test_unrecorded_engine_checks_its_config_version(tmp_path):
    folder = tmp_path / "foreign"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"version": "0.17.0", "build_config": {}}))
    with pytest.raises(UnsupportedError, match="0.17.0"):
        check_engine_compatible(folder, "h100", "1.1.0")


def _installed(folder: Path, version: str) -> Path:
    """A tensorrt_llm distribution's metadata (what `pip install tensorrt_llm` leaves in site-packages)."""
    info = folder / f"tensorrt_llm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n")
    return folder


def test_the_version_check_compares_the_engines_own_record_with_the_installed_tensorrt_llm(tmp_path, monkeypatch):
    """The version is the one trtllm-build wrote into config.json, not the pinned constant the profile carries; the
    other side is the TensorRT-LLM installed where it is served, not the pin either."""
    from pipeline.build.profiles import engine_built_version, installed_trtllm_version

    older = _engine(tmp_path / "older", built_with="1.0.0")  # its profile says 1.1.0 (the pin it was planned for)
    assert engine_built_version(older) == "1.0.0"
    with pytest.raises(UnsupportedError, match=r"built with TensorRT-LLM 1\.0\.0 \(its config.json\); this environment has 1\.1\.0"):
        check_engine_compatible(older, "h100-sxm", "1.1.0")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    assert installed_trtllm_version() is None  # not installed (a CI machine rendering): the image it is served in
    with pytest.raises(UnsupportedError, match="no TensorRT-LLM is installed here, and the pinned image .* has 1.1.0"):
        check_engine_compatible(older, "h100-sxm")
    monkeypatch.syspath_prepend(str(_installed(tmp_path / "site", "1.2.0")))
    assert installed_trtllm_version() == "1.2.0"
    pinned = _engine(tmp_path / "pinned")
    with pytest.raises(UnsupportedError, match="TensorRT-LLM 1.1.0 \\(its config.json\\); this environment has 1.2.0"):
        check_engine_compatible(pinned, "h100-sxm")


def test_the_installed_version_is_read_from_the_python_that_runs_the_tools(tmp_path, monkeypatch):
    """In the image the pipeline runs in its own venv; TensorRT-LLM is in the system python that trtllm-build's #! names."""
    import stat
    import sys

    from pipeline.build.profiles import installed_trtllm_version

    tools = tmp_path / "bin"
    tools.mkdir()
    script = tools / "trtllm-build"
    script.write_text(f"#!{sys.executable}\nprint('stand-in')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setenv("PYTHONPATH", str(_installed(tmp_path / "system-site", "1.1.0")))  # seen by that python only
    assert installed_trtllm_version() == "1.1.0"
    with pytest.raises(UnsupportedError, match="built with TensorRT-LLM 0.21.0"):
        check_engine_compatible(_engine(tmp_path / "e", built_with="0.21.0"), "h100-sxm")

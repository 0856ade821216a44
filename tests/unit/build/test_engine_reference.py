"""`pipeline build --gpu cpu`: the reference runtime's engine folder, its manifest and its cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pipeline.core.artifacts import read_manifest
from pipeline.build import BuildSpec, build_engine, plan_build
from pipeline.cli import run
from pipeline.build.profiles import BuildProfile, engine_profile
from build_cases import build_root, tiny_hf  # noqa: F401  (build_root: a fixture)


def test_reference_engine_folder_layout(tmp_path, build_root):
    hf = tiny_hf(build_root / "tiny" / "hf")
    result = build_engine(BuildSpec(gpu="cpu", model="tiny", goal="latency"))
    engine = result.engine_dir
    assert engine == build_root / "tiny" / "engines" / result.plan.profile_id
    config = json.loads((engine / "config.json").read_text())
    assert config["runtime"] == "reference" and "version" in config and "pretrained_config" in config
    build_config = config["build_config"]
    for key in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width"):
        assert isinstance(build_config[key], int)
    assert build_config["plugin_config"]["paged_kv_cache"] is True
    assert build_config["plugin_config"]["tokens_per_block"] == 32
    assert (engine / "tokenizer" / "tokenizer.json").is_file()
    assert (engine / "model" / "model.safetensors").stat().st_ino == (hf / "model.safetensors").stat().st_ino  # hard link
    manifest = read_manifest(engine)
    profile = BuildProfile(**manifest["profile"])
    assert profile.id == engine.name == result.plan.profile_id
    assert profile.name == "ref-cpu-fp16-tp1-latency" and profile.runtime == "reference"
    assert manifest["timings"]["build_s"] >= 0 and manifest["versions"]["trtllm"] == profile.trtllm_version
    assert "model/model.safetensors" in manifest["files"]
    assert engine_profile(engine) == profile


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def test_same_inputs_again_is_a_fast_no_op_and_force_rebuilds(build_root):
    tiny_hf(build_root / "tiny" / "hf")
    spec = BuildSpec(gpu="cpu", model="tiny")
    first = build_engine(spec)
    stamp = (first.engine_dir / "manifest.json").stat().st_mtime_ns
    written = _mtimes(first.engine_dir)
    again = build_engine(spec)
    assert again.cached and not first.cached
    # a no-op: nothing written again (a wall-clock bound on 2 shared cores would test the machine instead)
    assert (again.engine_dir / "manifest.json").stat().st_mtime_ns == stamp and _mtimes(again.engine_dir) == written
    forced = build_engine(spec.model_copy(update={"force": True}))
    assert not forced.cached and (forced.engine_dir / "manifest.json").stat().st_mtime_ns != stamp
    other = build_engine(spec.model_copy(update={"max_batch_size": 3}))
    assert other.engine_dir != first.engine_dir  # another profile, another folder
    assert json.loads((other.engine_dir / "config.json").read_text())["build_config"]["max_batch_size"] == 3


def test_changed_checkpoint_rebuilds(build_root):
    hf = tiny_hf(build_root / "tiny" / "hf")
    first = build_engine(BuildSpec(gpu="cpu", model="tiny"))
    (hf / "tokenizer_config.json").write_text('{"model_max_length": 4096}')
    second = build_engine(BuildSpec(gpu="cpu", model="tiny"))
    assert not second.cached and second.plan.profile.model_revision != first.plan.profile.model_revision


def _fp8_checkpoint(model_dir: Path, hf: Path, pp: int = 1) -> Path:
    """A converted FP8 checkpoint of the tiny model (2 layers) in model_dir/checkpoints/, split into `pp` stages, whose
    manifest names its source."""
    ckpt = model_dir / "checkpoints" / f"fp8-tp1-pp{pp}-abc"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text(json.dumps({
        "architecture": "LlamaForCausalLM", "dtype": "float16", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "max_position_embeddings": 4096, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None},
        "mapping": {"world_size": pp, "tp_size": 1, "pp_size": pp}}))
    (ckpt / "manifest.json").write_text(json.dumps({"hf_dir": str(hf), "files": {}}))
    return ckpt


def test_trtllm_checkpoint_on_the_cpu_serves_its_hf_source(tmp_path, build_root):
    hf = tiny_hf(build_root / "tiny" / "hf")
    ckpt = _fp8_checkpoint(build_root / "tiny", hf)
    plan = plan_build(BuildSpec(gpu="cpu", checkpoint=ckpt))
    assert plan.checkpoint == hf.resolve() and plan.profile.model == "tiny"
    # the checkpoint's precision is kept and simulated by the runtime, not silently dropped
    assert plan.profile.quant == "fp8" and plan.profile_name == "ref-cpu-fp8-tp1-throughput"
    assert any("simulated with ModelOpt fake quantization" in note for note in plan.notes)


def test_an_engine_checkpoint_with_more_stages_than_layers_is_refused(tmp_path, build_root, capsys):
    """The engine path refuses the checkpoint's own pipeline split as the plan and the PyTorch build refuse --pp: a
    stage without a decoder layer (planner.stages.check_pp), before any flag is planned. Both limits are given, so the
    planner (whose Scenario refuses it too) is not asked: the refusal is the engine path's own."""
    hf = tiny_hf(build_root / "tiny" / "hf")
    ckpt = _fp8_checkpoint(build_root / "tiny", hf, pp=4)
    assert run(["build", "--checkpoint", str(ckpt), "--gpu", "h100", "--max-batch-size", "8", "--max-num-tokens", "512"]) == 2
    err = capsys.readouterr().err
    assert "--pp 4" in err and "2 decoder layers" in err and "between 1 and 2" in err
    assert not (build_root / "tiny" / "engines").exists()


def test_a_checkpoint_from_another_build_root_keeps_its_models_name(tmp_path, build_root):
    """A download (<model>/hf) or a conversion (<model>/checkpoints/<id>) made under another build root is built under
    this one as <model>, the name the planner's calibration gives it too (before: "hf", so a bench of the deployment
    could not calibrate a plan of the same folder); any other folder keeps its own name."""
    from pipeline.planner.calibrate import model_identity

    elsewhere = tmp_path / "other-build"
    hf = tiny_hf(elsewhere / "tiny-elsewhere" / "hf")
    assert plan_build(BuildSpec(gpu="cpu", checkpoint=hf)).profile.model == "tiny-elsewhere" == model_identity(hf)
    result = build_engine(BuildSpec(gpu="cpu", checkpoint=hf))
    assert result.engine_dir.parent == build_root.resolve() / "tiny-elsewhere" / "engines"
    ckpt = _fp8_checkpoint(elsewhere / "tiny-elsewhere", hf)
    assert plan_build(BuildSpec(gpu="cpu", checkpoint=ckpt)).profile.model == "tiny-elsewhere"
    plain = tiny_hf(tmp_path / "My Model")
    assert plan_build(BuildSpec(gpu="cpu", checkpoint=plain)).profile.model == "my-model"


def test_cpu_quant_is_recorded_for_the_runtime_to_simulate(build_root):
    tiny_hf(build_root / "tiny" / "hf")
    result = build_engine(BuildSpec(gpu="cpu", model="tiny", quant="int8_sq", kv_cache="fp8"))
    quantization = json.loads((result.engine_dir / "config.json").read_text())["pretrained_config"]["quantization"]
    assert quantization == {"quant_algo": "W8A8_SQ_PER_CHANNEL", "kv_cache_quant_algo": "FP8",
                            "simulated": {"quant": "int8_sq", "kv_cache": "fp8"}}
    plain = build_engine(BuildSpec(gpu="cpu", model="tiny"))
    assert plain.engine_dir != result.engine_dir
    assert json.loads((plain.engine_dir / "config.json").read_text())["pretrained_config"]["quantization"]["simulated"] == {
        "quant": "fp16", "kv_cache": "auto"}


def test_cpu_refusals(build_root, capsys):
    tiny_hf(build_root / "tiny" / "hf")
    assert run(["build", "--model", "tiny", "--gpu", "cpu", "--quant", "int3"]) == 2
    assert "Unknown quantization format" in capsys.readouterr().err
    assert run(["build", "--model", "tiny", "--gpu", "cpu", "--tp", "2"]) == 2
    assert "reference runtime" in capsys.readouterr().err
    assert run(["build", "--model", "missing", "--gpu", "cpu"]) == 2
    assert run(["build", "--model", "tiny", "--gpu", "cpu", "--max-input-len", "4000", "--max-seq-len", "3000"]) == 2
    assert run(["build", "--model", "tiny", "--gpu", "cpu", "--goal", "fast"]) == 2
    assert not (build_root / "tiny" / "engines").exists() or not any((build_root / "tiny" / "engines").iterdir())


@pytest.mark.slow
def test_demo_engine_loads_with_transformers_and_cache_hit_writes_nothing(demo_hf_dir, tmp_path, monkeypatch, capsys):
    """The real demo checkpoint: the engine folder's model/ and tokenizer/ load as they are."""
    from transformers import AutoConfig, AutoTokenizer

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    argv = ["build", "--checkpoint", str(demo_hf_dir), "--model", "demo", "--gpu", "cpu", "--goal", "latency", "--json"]
    started = time.perf_counter()
    assert run(argv) == 0
    first_s = time.perf_counter() - started
    first = json.loads(capsys.readouterr().out)
    written = _mtimes(Path(first["engine_dir"]))
    started = time.perf_counter()
    assert run(argv) == 0
    again_s = time.perf_counter() - started
    again = json.loads(capsys.readouterr().out)
    # a cache hit redoes nothing: no file written again. Not a time bound: the reference build hard-links the
    # weights, so it takes about as long as the check (0.6 s each on 2 busy cores) and no ratio tells them apart
    assert again["cached"] and not first["cached"] and _mtimes(Path(again["engine_dir"])) == written
    print(f"reference build: first {first_s:.2f} s, cache hit {again_s:.2f} s")
    engine = Path(first["engine_dir"])
    tokenizer = AutoTokenizer.from_pretrained(engine / "tokenizer")
    assert tokenizer("Hello")["input_ids"]
    assert AutoConfig.from_pretrained(engine / "model").num_hidden_layers == 30
    assert os.path.samefile(engine / "model" / "model.safetensors", Path(demo_hf_dir) / "model.safetensors")

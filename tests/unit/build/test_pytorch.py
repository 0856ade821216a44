"""`pipeline build --backend pytorch`: the PyTorch-backend deployable (model/ links, llm_api_options.yaml,
manifest), the planner's options per GPU and goal, the refusals, and pipeline.core.deployable's reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline.core.artifacts import read_manifest
from pipeline.build import BuildSpec, build_engine, plan_build
from pipeline.build.pytorch import build_pytorch, plan_pytorch
from pipeline.cli import run
from pipeline.core.deployable import OPTIONS_FILE, is_pytorch_deployable, read_deployable
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.build.profiles import BuildProfile, check_engine_compatible
from reporting_helpers import ProgressLog
from build_cases import build_root, make_hf_checkpoint, tiny_hf  # noqa: F401  (build_root: a fixture)

def make_trtllm_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "architecture": "LlamaForCausalLM", "dtype": "float16", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "max_position_embeddings": 4096, "quantization": {"quant_algo": "FP8"}, "mapping": {"tp_size": 1, "pp_size": 1}}))
    (folder / "manifest.json").write_text(json.dumps({"stage": "convert", "files": {}}))
    return folder


def spec(**fields) -> BuildSpec:
    return BuildSpec(backend="pytorch", **fields)


def test_gpu_deployable_layout_links_and_manifest(build_root):
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8", kv="fp8")
    result = build_pytorch(spec(gpu="h100", checkpoint=ckpt, goal="latency"))
    folder = result.deploy_dir
    assert folder == build_root / "tiny" / "engines" / result.plan.profile_id
    assert sorted(p.name for p in folder.iterdir()) == ["llm_api_options.yaml", "manifest.json", "model"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "hf_quant_config.json"):
        assert (folder / "model" / name).stat().st_ino == (ckpt / name).stat().st_ino  # hard links
    assert not (folder / "model" / "manifest.json").exists()
    options = yaml.safe_load((folder / OPTIONS_FILE).read_text())
    manifest = read_manifest(folder)
    assert manifest["stage"] == "build" and manifest["backend"] == "pytorch" and manifest["options"] == options
    assert manifest["runtime"] == "pytorch" and manifest["simulated"] is None
    assert manifest["checkpoint"]["path"] == str(ckpt.resolve()) and manifest["checkpoint"]["format"] == "hf"
    assert manifest["checkpoint"]["hash"] == manifest["profile"]["model_revision"]
    profile = BuildProfile(**manifest["profile"])
    assert profile.backend == "pytorch" and profile.id == folder.name
    assert profile.name == "torch-h100-sxm-fp8-kvfp8-tp1-latency" and (profile.quant, profile.kv_cache) == ("fp8", "fp8")
    assert options == {
        "backend": "pytorch", "tensor_parallel_size": 1, "max_batch_size": options["max_batch_size"],
        "max_num_tokens": options["max_num_tokens"], "max_seq_len": 2048,
        "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "dtype": "fp8", "enable_block_reuse": True},
        "cuda_graph_config": {"batch_sizes": options["cuda_graph_config"]["batch_sizes"], "enable_padding": True},
    }
    assert options["cuda_graph_config"]["batch_sizes"][-1] == options["max_batch_size"]
    assert options["max_num_tokens"] >= profile.max_input_len
    # TensorRT-LLM 1.1 loads the calibrated FP8 KV scales only with TRTLLM_LOAD_KV_SCALES=1: the deployable asks for it
    assert manifest["env"] == {"TRTLLM_LOAD_KV_SCALES": "1"} == read_deployable(folder).env
    assert "TRTLLM_LOAD_KV_SCALES=1" in manifest["why"]["kv_cache_config.dtype"]
    assert "# TRTLLM_LOAD_KV_SCALES=1 trtllm-serve" in (folder / OPTIONS_FILE).read_text()


def test_planner_options_follow_the_engine_path_per_gpu_and_goal(build_root):
    from pipeline.build import plan_build

    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    hf = tiny_hf(build_root / "tiny" / "hf")
    for gpu in ("l4", "h100", "b200"):
        for goal in ("latency", "throughput"):
            torch = plan_pytorch(spec(gpu=gpu, checkpoint=ckpt, goal=goal))
            engine = plan_build(BuildSpec(gpu=gpu, checkpoint=hf, goal=goal))
            assert torch.limits == engine.limits and torch.memory == engine.memory
            assert torch.options["max_batch_size"] == torch.limits.max_batch_size
            assert torch.options["max_num_tokens"] == torch.limits.max_num_tokens
            assert torch.options["max_seq_len"] == torch.limits.max_seq_len
    latency = plan_pytorch(spec(gpu="h100", checkpoint=ckpt, goal="latency"))
    throughput = plan_pytorch(spec(gpu="h100", checkpoint=ckpt, goal="throughput"))
    assert latency.options["max_batch_size"] < throughput.options["max_batch_size"]
    assert latency.profile_id != throughput.profile_id
    chunked = plan_pytorch(spec(gpu="h100", checkpoint=ckpt, max_num_tokens=512))
    assert chunked.options["enable_chunked_prefill"] is True
    tp2 = plan_pytorch(spec(gpu="h100", checkpoint=ckpt, tp=2))
    assert tp2.options["tensor_parallel_size"] == 2 and tp2.profile.name.startswith("torch-h100-sxm-fp16-tp2-")
    assert tp2.options["dtype"] == "float16"  # tiny_hf's weights are float32: loaded as the profile's fp16


def test_cpu_deployable_serves_16_bit_weights_and_simulates_a_quantized_checkpoint(build_root):
    source = tiny_hf(build_root / "tiny" / "hf")
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8", kv="fp8", source=source)
    reporter = ProgressLog()
    result = build_pytorch(spec(gpu="cpu", checkpoint=ckpt), reporter)
    files = len(list((result.deploy_dir / "model").iterdir()))
    assert reporter.calls[0] == ("start", "model/ from hf", files) and reporter.calls.count(("advance", 1, None)) == files
    deployable = read_deployable(result.deploy_dir)
    assert deployable.is_cpu and deployable.runtime == "reference" and deployable.simulated == ("fp8", "fp8")
    assert BuildProfile(**deployable.manifest["profile"]).name == "ref-cpu-fp8-kvfp8-tp1-throughput-torch"
    assert (deployable.model_dir / "model.safetensors").stat().st_ino == (source / "model.safetensors").stat().st_ino
    assert not (deployable.model_dir / "hf_quant_config.json").exists()  # the 16-bit source, loadable by transformers
    assert deployable.options["cuda_graph_config"] is None and deployable.options["tensor_parallel_size"] == 1
    assert deployable.manifest["model_source"] == str(source.resolve())
    assert deployable.env == {}  # the reference runtime simulates the KV precision: no scales to load
    assert any("simulated" in note for note in deployable.manifest["notes"])


def test_cpu_deployable_model_loads_with_transformers(build_root):
    """model/ of a --gpu cpu deployable is what transformers loads on the CPU (the reference runtime's loader)."""
    import torch
    import transformers

    hf = build_root / "tiny" / "hf"
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        vocab_size=64, max_position_embeddings=256))
    model.save_pretrained(hf)
    tiny_hf_tokenizer(hf)
    result = build_pytorch(spec(gpu="cpu", checkpoint=hf))
    loaded = transformers.AutoModelForCausalLM.from_pretrained(result.deploy_dir / "model", dtype=torch.float32)
    assert loaded.config.hidden_size == 32


def tiny_hf_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    (folder / "tokenizer_config.json").write_text("{}")


def test_manifest_hashes_match_the_files_and_reuse_the_checkpoints(build_root, monkeypatch):
    from pipeline.core.artifacts import ArtifactOrigin, build_manifest, file_inventory, write_json_atomic

    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    # the checkpoint's own manifest as convert writes it: hashes and mtimes of its files
    write_json_atomic(ckpt / "manifest.json", {**build_manifest(ArtifactOrigin("convert", {}, "x"), ckpt, 0.0), "format": "hf"})
    import pipeline.core.artifacts as artifacts

    hashed: list[str] = []
    real = artifacts.sha256_file
    monkeypatch.setattr(artifacts, "sha256_file", lambda path: hashed.append(Path(path).name) or real(path))
    folder = build_pytorch(spec(gpu="h100", checkpoint=ckpt)).deploy_dir
    assert hashed == ["llm_api_options.yaml"]  # model/ files: hashes taken from the checkpoint's manifest
    monkeypatch.setattr(artifacts, "sha256_file", real)
    assert read_manifest(folder)["files"] == file_inventory(folder)


def test_cached_then_force_rewrites(build_root):
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    first = build_pytorch(spec(gpu="h100", checkpoint=ckpt))
    again = build_pytorch(spec(gpu="h100", checkpoint=ckpt))
    assert again.cached and not first.cached and again.deploy_dir == first.deploy_dir
    forced = build_pytorch(spec(gpu="h100", checkpoint=ckpt, force=True))
    assert not forced.cached


def test_the_build_stage_follows_the_specs_backend(build_root):
    """build_engine and plan_build make the deployable for backend="pytorch", as the CLI and the engine job call
    them; a trtllm-build flag is refused there too, not only by the CLI."""
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    planned = plan_build(spec(gpu="h100", checkpoint=ckpt))
    built = build_engine(spec(gpu="h100", checkpoint=ckpt))
    assert planned.output_dir == built.output_dir == built.deploy_dir and (built.deploy_dir / OPTIONS_FILE).is_file()
    assert built.plan.profile.backend == "pytorch"
    with pytest.raises(InvalidInputError) as refused:
        plan_build(spec(gpu="h100", checkpoint=ckpt, tokens_per_block=64))
    assert "--tokens-per-block and --gemm-plugin are trtllm-build flags" in refused.value.message


def test_refusals_exit_2(build_root, capsys):
    trtllm = make_trtllm_checkpoint(build_root / "tiny" / "checkpoints" / "fp8-trt")
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(trtllm), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "TensorRT-LLM checkpoint" in err and "--format hf" in err
    hf = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8")
    assert run(["build", "--checkpoint", str(hf), "--gpu", "h100"]) == 2  # the engine path
    err = capsys.readouterr().err
    assert "--backend pytorch --checkpoint" in err
    assert run(["build", "--checkpoint", str(hf), "--gpu", "cpu"]) == 2
    capsys.readouterr()
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(hf), "--gpu", "a100"]) == 2  # fp8 needs SM 8.9
    assert "cannot run fp8" in capsys.readouterr().err
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(hf), "--gpu", "h100", "--quant", "int8_sq"]) == 2
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(hf), "--gpu", "h100", "--pp", "3"]) == 2  # 2 layers
    assert "2 decoder layers" in capsys.readouterr().err
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(hf), "--gpu", "h100", "--gemm-plugin", "fp8"]) == 2
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(hf), "--gpu", "cpu", "--tp", "2"]) == 2
    assert run(["build", "--backend", "onnx", "--checkpoint", str(hf), "--gpu", "h100"]) == 2
    assert not (build_root / "tiny" / "engines").exists()


def test_awq_is_refused_on_blackwell_as_1_1_0s_hardware_matrix_says(build_root, capsys):
    """TensorRT-LLM 1.1.0's quantization hardware support matrix (pipeline/data/trtllm_quant_hardware.tsv) marks
    W4A16 AWQ and W4A8 AWQ unsupported on sm100/103 and sm120: refused before anything is written, naming the GPU,
    the precision and what runs instead; the same checkpoints plan on Hopper."""
    for quant in ("int4_awq", "w4a8_awq"):
        ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / f"hf-{quant}", quant=quant)
        with pytest.raises(UnsupportedError) as refused:
            plan_pytorch(spec(gpu="b200", checkpoint=ckpt))
        assert f"{quant} weights on Blackwell(sm100/103) (b200, SM 10.0)" in refused.value.message
        assert "fp8, nvfp4" in refused.value.hint and "h100-sxm" in refused.value.hint
        assert plan_pytorch(spec(gpu="h100", checkpoint=ckpt)).profile.quant == quant
        assert run(["build", "--backend", "pytorch", "--checkpoint", str(ckpt), "--gpu", "b200"]) == 2
        assert "Blackwell" in capsys.readouterr().err
    assert not (build_root / "tiny" / "engines").exists()


def test_quantized_checkpoint_without_its_source_is_refused_on_the_cpu(build_root):
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8")
    with pytest.raises(InvalidInputError) as refused:
        plan_pytorch(spec(gpu="cpu", checkpoint=ckpt))
    assert "transformers cannot load" in refused.value.message and "--quant fp8" in refused.value.hint


def test_a_key_llm_args_lacks_is_refused_before_anything_is_written(build_root, monkeypatch, capsys):
    """As if TensorRT-LLM 1.1.0 had no max_num_tokens: the build exits 2 naming the key and writes nothing."""
    import pipeline.build.llm_args as llm_args

    real = llm_args.top_level_fields()
    monkeypatch.setattr(llm_args, "top_level_fields", lambda: {k: v for k, v in real.items() if k != "max_num_tokens"})
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(ckpt), "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "max_num_tokens" in err and "nearest valid" in err
    assert not (build_root / "tiny" / "engines").exists()


def test_plan_from_the_hf_folder_with_another_precision_is_plan_only(build_root, capsys):
    tiny_hf(build_root / "tiny" / "hf")
    assert run(["build", "--backend", "pytorch", "--model", "tiny", "--gpu", "h100", "--quant", "fp8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "free_gpu_memory_fraction: 0.9" in out and "memory/GPU" in out and "plan only" in out and "--format hf" in out
    assert run(["build", "--backend", "pytorch", "--model", "tiny", "--gpu", "h100", "--quant", "fp8"]) == 2
    assert run(["build", "--backend", "pytorch", "--model", "tiny", "--gpu", "h100", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert Path(result["deploy_dir"]).name == result["plan"]["profile_id"]
    assert result["output_dir"] == result["deploy_dir"] == result["plan"]["output_dir"]  # the key both backends share


def test_model_name_finds_the_newest_hf_checkpoint_of_the_asked_precision(build_root):
    tiny_hf(build_root / "tiny" / "hf")
    fp8 = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8")
    fp16 = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    make_trtllm_checkpoint(build_root / "tiny" / "checkpoints" / "fp8-tp1")
    assert plan_pytorch(spec(gpu="h100", model="tiny", quant="fp8")).checkpoint == fp8.resolve()
    assert plan_pytorch(spec(gpu="h100", model="tiny")).checkpoint == fp16.resolve()
    with pytest.raises(InvalidInputError):  # no int4_awq checkpoint: planned from hf/, but not built
        build_pytorch(spec(gpu="h100", model="tiny", quant="int4_awq"))


def test_engine_path_does_not_pick_an_hf_checkpoint_by_model_name(build_root):
    from pipeline.build import plan_build

    make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    with pytest.raises(InvalidInputError) as refused:
        plan_build(BuildSpec(gpu="h100", model="tiny"))
    assert "No fp16 checkpoint" in refused.value.message


def test_dry_run_json_has_options_and_memory(build_root, capsys):
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(ckpt), "--gpu", "h200", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["options"]["backend"] == "pytorch" and plan["memory"]["fits"] is True
    assert not (build_root / "tiny" / "engines").exists()


def test_engine_ids_do_not_change_and_backends_differ():
    engine = BuildProfile(model="m", model_revision="r1", runtime="tensorrtllm", gpu="h100-sxm", compute_capability="9.0",
                          quant="fp8", kv_cache="fp8", goal="throughput")
    cpu = BuildProfile(model="demo", model_revision="abc", runtime="reference", gpu="cpu", goal="latency")
    # ids computed by pipeline/build/profiles.py before BuildProfile had a backend field (commit e4b14e9)
    assert engine.id == "9c61e60c25ad" and cpu.id == "2d930491a505"
    torch, torch_cpu = engine.model_copy(update={"backend": "pytorch"}), cpu.model_copy(update={"backend": "pytorch"})
    assert torch.id != engine.id and torch_cpu.id != cpu.id
    assert (engine.name, torch.name) == ("trtllm-h100-sxm-fp8-kvfp8-tp1-throughput", "torch-h100-sxm-fp8-kvfp8-tp1-throughput")
    assert (cpu.name, torch_cpu.name) == ("ref-cpu-fp16-tp1-latency", "ref-cpu-fp16-tp1-latency-torch")
    assert BuildProfile(**json.loads(json.dumps(torch.model_dump(mode="json")))).id == torch.id


def test_engine_build_of_the_reference_runtime_is_unchanged(build_root):
    tiny_hf(build_root / "tiny" / "hf")
    result = build_engine(BuildSpec(gpu="cpu", model="tiny", goal="latency"))
    assert "backend" not in read_manifest(result.engine_dir) and not is_pytorch_deployable(result.engine_dir)
    assert BuildProfile(**read_manifest(result.engine_dir)["profile"]).backend == "tensorrt"


def test_read_deployable_and_compatibility(build_root):
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8")
    folder = build_pytorch(spec(gpu="h100", checkpoint=ckpt)).deploy_dir
    assert is_pytorch_deployable(folder) and not is_pytorch_deployable(ckpt)
    deployable = read_deployable(folder)
    assert deployable.options_path == folder.resolve() / OPTIONS_FILE and deployable.gpu == "h100-sxm"
    assert check_engine_compatible(folder, "h200").backend == "pytorch"  # no engine: any GPU that runs fp8
    with pytest.raises(UnsupportedError):
        check_engine_compatible(folder, "cpu")
    with pytest.raises(UnsupportedError):
        check_engine_compatible(folder, "a100")
    with pytest.raises(InvalidInputError):
        read_deployable(ckpt)
    (folder / OPTIONS_FILE).write_text("backend: pytorch\n")  # edited by hand: no longer what the manifest says
    with pytest.raises(InvalidInputError):
        read_deployable(folder)


def test_pipeline_stages_set_pipeline_parallel_size_and_limits_per_micro_batch(build_root, capsys):
    """--pp on the PyTorch backend: pipeline_parallel_size (1.1.0's BaseLlmArgs key, which trtllm-serve --pp_size and the
    Triton LLM-API model read), the profile's pp, memory of the fullest stage and limits of one micro-batch; refused with
    --speculative (the pipeline executor runs no draft model), on the CPU, and beyond the model's layers."""
    from pipeline.core.deployable import read_deployable
    from pipeline.serve.openai import trtllm_command

    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8", kv="fp8")
    plain = plan_pytorch(spec(gpu="l40s", checkpoint=ckpt))
    result = build_pytorch(spec(gpu="l40s", checkpoint=ckpt, pp=2))
    options = yaml.safe_load((result.deploy_dir / OPTIONS_FILE).read_text())
    assert options["pipeline_parallel_size"] == 2 and options["tensor_parallel_size"] == 1
    assert "pipeline_parallel_size" not in plain.options and "micro-batch" in result.plan.why["pipeline_parallel_size"]
    assert result.plan.profile.pp == 2 and result.plan.profile.name == "torch-l40s-fp8-kvfp8-tp1-pp2-throughput"
    assert result.plan.memory.kv_bytes_per_token == plain.memory.kv_bytes_per_token / 2  # one of the 2 layers per stage
    assert result.plan.limits.max_batch_size <= plain.limits.max_batch_size  # a micro-batch's share of the sequences
    command = trtllm_command(read_deployable(result.deploy_dir), "0.0.0.0", 8000)
    assert command[command.index("--pp_size") + 1] == "2"
    for refused, why in (
        (["--pp", "2", "--speculative", "ngram"], "runs no draft model"),
        (["--pp", "3"], "2 decoder layers"),
    ):
        argv = ["build", "--backend", "pytorch", "--gpu", "l40s", "--checkpoint", str(ckpt), *refused]
        assert run(argv) == 2, argv
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, err
    assert run(["build", "--backend", "pytorch", "--gpu", "cpu", "--checkpoint", str(ckpt), "--pp", "2"]) == 2
    assert "tp and pp must be 1" in capsys.readouterr().err


def _tiny_moe(folder: Path) -> Path:
    """make_hf_checkpoint's folder with a Qwen3-MoE config: 8 experts of width 32, 2 per token."""
    ckpt = make_hf_checkpoint(folder, quant="fp8", kv="fp8")
    config = json.loads((ckpt / "config.json").read_text())
    config.update({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 8,
                   "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1, "mlp_only_layers": []})
    (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt


def test_attention_dp_deployable_spreads_the_experts_over_the_gpus(build_root, capsys):
    """--attention-dp: enable_attention_dp and moe_expert_parallel_size = tp (keys of 1.1.0's TorchLlmArgs), limits and
    memory per GPU, its own profile id and name; refused where it cannot apply."""
    from pipeline.build.pytorch import TorchPlan

    ckpt = _tiny_moe(build_root / "tiny" / "checkpoints" / "hf-fp8")
    plain = plan_pytorch(spec(gpu="h100", checkpoint=ckpt, tp=2))
    result = build_pytorch(spec(gpu="h100", checkpoint=ckpt, tp=2, attention_dp=True))
    plan: TorchPlan = result.plan
    options = yaml.safe_load((result.deploy_dir / OPTIONS_FILE).read_text())
    assert options["enable_attention_dp"] is True and options["moe_expert_parallel_size"] == 2
    assert options["tensor_parallel_size"] == 2 and "each GPU's" in plan.why["enable_attention_dp"]
    assert "enable_attention_dp" not in plain.options
    assert plan.profile.attention_dp and plan.profile_id != plain.profile_id
    assert plan.profile.name == "torch-h100-sxm-fp8-kvfp8-dep2-throughput" and plain.profile.name.endswith("-tp2-throughput")
    assert "attention_dp" not in plain.profile.identity()  # profiles without it keep their ids
    assert plan.memory.kv_bytes_per_token == 2 * plain.memory.kv_bytes_per_token  # every KV head, for its own requests
    assert read_manifest(result.deploy_dir)["profile"]["attention_dp"] is True
    dense = make_hf_checkpoint(build_root / "dense" / "checkpoints" / "hf-fp8", quant="fp8", kv="fp8")
    for refused, why in (
        (["build", "--backend", "pytorch", "--gpu", "h100", "--checkpoint", str(dense), "--tp", "2", "--attention-dp"], "has none"),
        (["build", "--gpu", "h100", "--checkpoint", str(ckpt), "--tp", "2", "--attention-dp"], "PyTorch backend"),
        (["build", "--backend", "pytorch", "--gpu", "h100", "--checkpoint", str(ckpt), "--tp", "3", "--attention-dp"], "divide"),
        (["build", "--backend", "pytorch", "--gpu", "h100", "--checkpoint", str(ckpt), "--tp", "2", "--attention-dp",
          "--lora", str(build_root / "adapter")], "--lora is not planned"),
    ):
        assert run(refused) == 2, refused
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, err


def test_attention_dp_build_takes_the_slo_searchs_dep_choice(build_root):
    ckpt = _tiny_moe(build_root / "tiny" / "checkpoints" / "hf-fp8")
    plan = plan_pytorch(spec(gpu="h100", checkpoint=ckpt, tp=2, attention_dp=True, slo="tpot_p99_ms=50", slo_isl=512,
                             slo_osl=128))
    assert plan.slo_plan and plan.options["enable_attention_dp"] is True
    assert plan.options["max_batch_size"] == plan.slo_plan["max_batch_size"]  # each GPU's
    assert plan.slo_plan["concurrency"] > 0 and plan.limits.max_batch_size == plan.slo_plan["max_batch_size"]

"""render for an engine with LoRA: the tensorrt_llm model's lora_cache_* parameters (NVIDIA's names, in the pinned
release's parameter table) and the adapters shipped in the bundle as lora_prefetch_dir, one task-id folder each,
with the path rendered for the bundle root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lora_cases import ATTENTION, MLP, make_adapter, tiny_llama
from render_cases import configs, trtllm_engine_dir


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    base = tiny_llama(root / "base")
    return base, make_adapter(base, root / "sql", rank=8, targets=ATTENTION), \
        make_adapter(base, root / "chat", rank=16, targets=ATTENTION + MLP, seed=2)


def _lora_engine(tmp_path: Path, adapters, with_manifest: bool) -> Path:
    """A trtllm-build config.json with the LoRA plugin, and the adapters converted into <engine>/lora/."""
    from pipeline.build.lora_build import lora_manifest, plan_lora, write_lora_dir
    from pipeline.build.checkpoint import read_checkpoint
    from pipeline.build.memory import EngineTarget, default_limits, estimate
    from pipeline.core.gpus import get_gpu
    from pipeline.core.quant import kv_cache_format, quant_format

    base, sql, chat = adapters
    engine = trtllm_engine_dir(tmp_path)
    config = json.loads((engine / "config.json").read_text())
    config["build_config"]["plugin_config"]["lora_plugin"] = "float16"
    config["build_config"]["lora_config"] = {"max_lora_rank": 32, "lora_target_modules": ["attn_q", "attn_k", "attn_v"]}
    (engine / "config.json").write_text(json.dumps(config))
    shape = read_checkpoint(base).shape
    lora = plan_lora([f"sql={sql}", f"5={chat}"], shape.model_copy(update={"dtype": "float16"}), max_lora_rank=32)
    write_lora_dir(lora, engine)
    if with_manifest:
        target = EngineTarget(shape, get_gpu("h100"), quant_format("fp16"), kv_cache_format("auto"))
        memory = estimate(target, default_limits(target), lora.cache_bytes)
        (engine / "manifest.json").write_text(json.dumps({"lora": lora_manifest(lora, memory)}))
    return engine


@pytest.mark.parametrize("with_manifest", [True, False])
def test_render_sets_lora_cache_parameters_and_ships_the_prefetch_dir(adapters, tmp_path, reference_tsv, with_manifest):
    from pipeline.render import render
    from pipeline.render.spec import RenderSpec

    engine = _lora_engine(tmp_path, adapters, with_manifest)
    out = tmp_path / "repo"
    result = render(RenderSpec(engine=engine, out=out, model_root=Path("/models")))
    params = {k: v.string_value for k, v in configs(result.repo)["tensorrt_llm"].parameters.items()}
    table = {row["parameter_key"] for row in reference_tsv("triton_trtllm_parameters.tsv") if row["model"] == "tensorrt_llm"}
    lora_keys = {k for k in params if k.startswith("lora_")}
    assert lora_keys == {"lora_cache_optimal_adapter_size", "lora_cache_max_adapter_size", "lora_cache_gpu_memory_fraction",
                         "lora_cache_host_memory_bytes", "lora_prefetch_dir"} and lora_keys <= table
    assert params["lora_prefetch_dir"] == "/models/tensorrt_llm/1/lora"  # for the bundle root, not this machine
    assert params["lora_cache_max_adapter_size"] == "32"
    assert int(params["lora_cache_host_memory_bytes"]) >= 1 << 30
    assert 0.05 <= float(params["lora_cache_gpu_memory_fraction"]) <= 1
    if with_manifest:
        assert params["lora_cache_optimal_adapter_size"] in ("8", "16")  # the adapters' own rank
    prefetch = out / "tensorrt_llm" / "1" / "lora"
    assert sorted(p.name for p in prefetch.iterdir()) == ["1", "5"]
    for task in ("1", "5"):
        assert {p.name for p in (prefetch / task).iterdir()} == {"model.lora_weights.npy", "model.lora_config.npy"}


def test_render_without_lora_sets_none(tmp_path):
    from pipeline.render import render
    from pipeline.render.spec import RenderSpec

    result = render(RenderSpec(engine=trtllm_engine_dir(tmp_path), out=tmp_path / "repo"))
    params = configs(result.repo)["tensorrt_llm"].parameters
    assert not [k for k in params if k.startswith("lora_")]


def test_prefetch_folder_named_0_is_refused(adapters, tmp_path):
    from pipeline.core.errors import InvalidInputError
    from pipeline.render import render
    from pipeline.render.spec import RenderSpec

    engine = _lora_engine(tmp_path, adapters, False)
    (engine / "lora" / "1").rename(engine / "lora" / "0")
    with pytest.raises(InvalidInputError, match="task id"):
        render(RenderSpec(engine=engine, out=tmp_path / "repo"))


def test_pytorch_deployable_bundle_carries_the_adapters_and_points_lora_dir_at_them(adapters, tmp_path, monkeypatch):
    """The deployable's lora/<name>/ (PEFT folders) travel in the bundle, and model.yaml's lora_config.lora_dir
    names them under the bundle root."""
    import yaml

    from pipeline.build import BuildSpec, build_engine
    from pipeline.render import render
    from pipeline.render.spec import RenderSpec
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    base, sql, chat = adapters
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"t0": 0, "t1": 1}, unk_token="t0"))
                            ).save_pretrained(base)
    deploy = build_engine(BuildSpec(gpu="cpu", backend="pytorch", checkpoint=base, lora=(f"sql={sql}", f"chat={chat}"))).deploy_dir
    out = tmp_path / "repo"
    render(RenderSpec(engine=deploy, out=out, model_root=Path("/models")))
    model_yaml = yaml.safe_load((out / "tensorrt_llm" / "1" / "model.yaml").read_text())
    dirs = model_yaml["lora_config"]["lora_dir"]
    assert dirs == ["/models/tensorrt_llm/1/lora/sql", "/models/tensorrt_llm/1/lora/chat"]
    for path in dirs:
        assert (out / Path(path).relative_to("/models") / "adapter_config.json").is_file()
    assert model_yaml.get("cuda_graph_config", "absent") in (None, "absent")
    from pipeline.bench.lora_mix import source_adapters

    assert source_adapters(deploy) == {"sql": {"task_id": 1, "path": str(deploy / "lora" / "sql")},
                                       "chat": {"task_id": 2, "path": str(deploy / "lora" / "chat")}}

"""`pipeline build --lora`: the trtllm-build LoRA flags (a contract test of the command line against the pinned
release's flag table), the memory estimate with the LoRA cache, the bad input refused before any work, the
reference engine folder carrying the converted adapters, and the PyTorch deployable's lora_config."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from lora_cases import ATTENTION, MLP, make_adapter, tiny_llama


@pytest.fixture(scope="module")
def lora_world(tmp_path_factory):
    """A tiny Llama (hidden 64, 2 layers) and PEFT adapters for it: attention r8, attention+MLP r16, MLP r4;
    one made for another hidden size and one for more layers; one DoRA; one with modules_to_save."""
    root = tmp_path_factory.mktemp("lora")
    base = tiny_llama(root / "base")
    other_hidden = tiny_llama(root / "base-h128", hidden=128)
    other_layers = tiny_llama(root / "base-l4", layers=4)
    adapters = {
        "sql": make_adapter(base, root / "sql", rank=8, targets=ATTENTION),
        "chat": make_adapter(base, root / "chat", rank=16, targets=ATTENTION + MLP, seed=2),
        "mlp": make_adapter(base, root / "mlp", rank=4, targets=MLP, seed=3),
        "wide": make_adapter(other_hidden, root / "wide", rank=8, targets=ATTENTION),
        "deep": make_adapter(other_layers, root / "deep", rank=8, targets=ATTENTION),
    }
    dora = make_adapter(base, root / "dora", rank=8, targets=ATTENTION)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    adapters["dora"] = dora
    saved = make_adapter(base, root / "saved", rank=8, targets=ATTENTION)
    config = json.loads((saved / "adapter_config.json").read_text())
    (saved / "adapter_config.json").write_text(json.dumps({**config, "modules_to_save": ["lm_head"]}))
    adapters["saved"] = saved
    return base, adapters


def _plan(base: Path, loras: list[str], gpu: str = "h100", quant: str = "fp16", **extra):
    from pipeline.build import BuildSpec, plan_build

    return plan_build(BuildSpec(gpu=gpu, checkpoint=base, quant=quant, lora=tuple(loras), **extra))


def _flag_values(argv: list[str], name: str) -> list[str]:
    start = argv.index(name) + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("--")), len(argv))
    return argv[start:end]


def test_lora_flags_are_trtllm_builds_own(lora_world, reference_tsv, monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    base, adapters = lora_world
    plan = _plan(base, [f"sql={adapters['sql']}", f"chat={adapters['chat']}"])
    table = {row["flag"]: row for row in reference_tsv("trtllm_build_flags.tsv")}
    argv = plan.command
    for name in ("--lora_plugin", "--lora_dir", "--lora_target_modules", "--max_lora_rank"):
        assert name in table and table[name]["takes_value"] == "yes", name
        assert argv.count(name) == 1
    # the engine's dtype: what `pipeline convert --quant fp16` makes of the (float32) HF folder
    assert _flag_values(argv, "--lora_plugin") == ["float16"]
    assert "float16" in table["--lora_plugin"]["choices"].split("|")
    assert _flag_values(argv, "--lora_dir") == [str(adapters["sql"].resolve()), str(adapters["chat"].resolve())]
    assert "nargs +" in table["--lora_dir"]["note"] and "nargs +" in table["--lora_target_modules"]["note"]
    modules = _flag_values(argv, "--lora_target_modules")
    assert modules == ["attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_4h_to_h", "mlp_gate"]
    assert set(modules) <= set(table["--lora_target_modules"]["choices"].split("|"))
    assert _flag_values(argv, "--max_lora_rank") == ["16"]  # the largest adapter rank
    assert plan.memory.lora_cache_gib > 0 and plan.memory.lora_cache_fraction >= 0.05
    assert plan.profile.lora and plan.profile_name.endswith("-lora")
    assert [(a.name, a.task_id) for a in plan.lora.adapters] == [("sql", 1), ("chat", 2)]


def test_memory_estimate_counts_the_lora_cache(lora_world, monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    base, adapters = lora_world
    without = _plan(base, [])
    with_lora = _plan(base, [f"chat={adapters['chat']}"])
    cache = with_lora.lora.cache_bytes
    # rank 16 over 7 modules x 2 layers, float32 rows padded to the longest (the converter's layout)
    assert cache == np.load(_converted(with_lora, tmp_path, "chat")).nbytes
    assert with_lora.memory.needed_gib == pytest.approx(without.memory.needed_gib + cache / (1 << 30), abs=2e-3)
    assert without.memory.lora_cache_gib == 0 and without.profile.lora is None
    assert without.profile_id != with_lora.profile_id


def _converted(plan, tmp_path, name) -> Path:
    from pipeline.convert.lora_set import convert_adapters

    ref = next(r for r in plan.lora.refs if r.name == name)
    convert_adapters([ref], plan.lora.shape, tmp_path / "conv")
    return tmp_path / "conv" / str(ref.task_id) / "model.lora_weights.npy"


@pytest.mark.parametrize("loras,extra,needle", [
    (["chat"], {"max_lora_rank": 8}, "rank 16 exceeds --max-lora-rank 8"),
    (["wide"], {}, "hidden size 128"),
    (["deep"], {}, "layer 2"),
    (["mlp"], {"lora_target_modules": ("attn_q", "attn_k", "attn_v")}, "built without"),
    (["dora"], {}, "DoRA"),
    (["saved"], {}, "modules_to_save"),
    (["0=sql"], {}, "task id 0"),
])
def test_bad_adapters_exit_2_before_any_work(lora_world, loras, extra, needle, tmp_path, monkeypatch, capsys):
    from pipeline.cli import run

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    base, adapters = lora_world
    argv = ["build", "--checkpoint", str(base), "--gpu", "cpu"]
    for item in loras:
        name, _, key = item.partition("=")
        argv += ["--lora", f"{name}={adapters[key]}" if key else str(adapters[name])]
    if "max_lora_rank" in extra:
        argv += ["--max-lora-rank", str(extra["max_lora_rank"])]
    for module in extra.get("lora_target_modules", ()):
        argv += ["--lora-target-modules", module]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not list(tmp_path.rglob("config.json")), "nothing built"


def test_lora_storage_dtype_is_the_engines(lora_world, tmp_path, monkeypatch):
    """A bf16 engine gets a bf16 LoRA plugin and bf16 adapters; the reference runtime the HF folder's own dtype."""
    import shutil

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    base, adapters = lora_world
    plan = _plan(base, [str(adapters["sql"])], quant="bf16")
    assert _flag_values(plan.command, "--lora_plugin") == ["bfloat16"] and plan.lora.shape.dtype == "bfloat16"
    bf16 = tmp_path / "base-bf16"
    shutil.copytree(base, bf16)
    config = json.loads((bf16 / "config.json").read_text())
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    (bf16 / "config.json").write_text(json.dumps(config))
    assert _plan(bf16, [str(adapters["sql"])], gpu="cpu", quant=None).lora.shape.dtype == "bfloat16"


def test_reference_build_carries_the_adapters(lora_world, tmp_path, monkeypatch):
    from pipeline.build import BuildSpec, build_engine

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    base, adapters = lora_world
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models

    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
                            ).save_pretrained(base)  # the reference build needs a tokenizer; the tiny model has none
    result = build_engine(BuildSpec(gpu="cpu", checkpoint=base, lora=(f"sql={adapters['sql']}", f"7={adapters['mlp']}")))
    engine = result.engine_dir
    assert sorted(p.name for p in (engine / "lora").iterdir()) == ["1", "7"]
    weights = np.load(engine / "lora" / "7" / "model.lora_weights.npy")
    config = np.load(engine / "lora" / "7" / "model.lora_config.npy")
    assert weights.ndim == 3 and weights.shape[0] == 1 and config.dtype == np.int32 and config.shape[2] == 3
    assert set(config[0, :, 0]) == {5, 6, 7}  # mlp_h_to_4h, mlp_4h_to_h, mlp_gate: NVIDIA's ids
    build_config = json.loads((engine / "config.json").read_text())["build_config"]
    assert build_config["plugin_config"]["lora_plugin"] == "float32"
    assert build_config["lora_config"]["max_lora_rank"] == 8
    manifest = json.loads((engine / "manifest.json").read_text())
    assert manifest["lora"]["task_ids"] == {"sql": 1, "7": 7}
    assert manifest["lora"]["cache"]["max_adapter_size"] == 8


def test_pytorch_deployable_gets_lora_config_and_no_cuda_graphs(lora_world, tmp_path, monkeypatch):
    from pipeline.build import BuildSpec, plan_build
    from pipeline.build.llm_args import option_problems

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    base, adapters = lora_world
    plan = plan_build(BuildSpec(gpu="h100", backend="pytorch", checkpoint=base, quant="fp16",
                                lora=(f"sql={adapters['sql']}", f"chat={adapters['chat']}")))
    options = plan.options
    assert options["cuda_graph_config"] is None
    lora = options["lora_config"]
    assert lora["max_lora_rank"] == 16 and lora["max_loras"] == 2 and lora["max_cpu_loras"] == 2
    assert lora["lora_dir"] == [str(plan.deploy_dir / "lora" / "sql"), str(plan.deploy_dir / "lora" / "chat")]
    assert "mlp_gate" in lora["lora_target_modules"]
    assert option_problems(options) == []
    assert option_problems({"lora_config": {"max_lora_rnk": 8}})  # LoraConfig's keys are checked too
    from pipeline.build.pytorch import options_yaml

    assert yaml.safe_load(options_yaml(plan))["lora_config"] == lora


def test_a_dtype_lora_cannot_store_is_refused(lora_world):
    """LoRA weights must be the engine's dtype (float16, bfloat16 or float32: what hf_lora_convert.py stores)."""
    from pipeline.build.checkpoint import read_checkpoint
    from pipeline.build.lora_build import plan_lora
    from pipeline.core.errors import InvalidInputError

    base, adapters = lora_world
    shape = read_checkpoint(base).shape.model_copy(update={"dtype": "float8_e4m3fn"})
    with pytest.raises(InvalidInputError, match="no LoRA plugin type"):
        plan_lora([str(adapters["sql"])], shape)

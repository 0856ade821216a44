"""Kubernetes for a deployment with LoRA adapters: the adapters travel in the bundle the pods mount at /models, and
every path the configs name for them is under /models and in the bundle (engine path: lora_prefetch_dir; PyTorch
backend, --api openai: lora_config.lora_dir of the options trtllm-serve reads; --api triton: model.yaml's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from k8s_cases import assert_valid
from lora_cases import ATTENTION, MLP, make_adapter, tiny_llama
from pipeline.cli import run


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("k8s-lora")
    base = tiny_llama(root / "base")
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"t0": 0, "t1": 1}, unk_token="t0"))
                            ).save_pretrained(base)
    return base, [f"sql={make_adapter(base, root / 'sql', rank=8, targets=ATTENTION)}",
                  f"chat={make_adapter(base, root / 'chat', rank=4, targets=ATTENTION + MLP, seed=2)}"]


def _profile(build_root: Path) -> str:
    folder = next((build_root / "base" / "engines").iterdir())
    return json.loads((folder / "manifest.json").read_text())["profile_id"]


def _under_models(bundle: Path, path: str) -> Path:
    assert path.startswith("/models/"), path
    return bundle / Path(path).relative_to("/models")


def test_engine_bundle_carries_the_prefetch_dir(world, build_root, capsys):
    base, loras = world
    argv = ["build", "--gpu", "cpu", "--checkpoint", str(base)]
    assert run(argv + [x for lora in loras for x in ("--lora", lora)] + ["--json"]) == 0
    capsys.readouterr()
    assert run(["k8s", "render", "--profile", _profile(build_root), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert_valid(Path(result["out_dir"]))
    bundle = Path(result["bundle_dir"])
    text = (bundle / "tensorrt_llm" / "config.pbtxt").read_text()
    prefetch = text.split('key: "lora_prefetch_dir"')[1].split('string_value: "')[1].split('"')[0]
    assert sorted(p.name for p in _under_models(bundle, prefetch).iterdir()) == ["1", "2"]


@pytest.mark.parametrize("api", ["openai", "triton"])
def test_pytorch_bundle_carries_the_peft_adapters(world, build_root, capsys, api):
    base, loras = world
    argv = ["build", "--gpu", "h100", "--backend", "pytorch", "--checkpoint", str(base), "--quant", "fp16"]
    assert run(argv + [x for lora in loras for x in ("--lora", lora)] + ["--json"]) == 0
    capsys.readouterr()
    assert run(["k8s", "render", "--profile", _profile(build_root), "--api", api, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert_valid(Path(result["out_dir"]))
    bundle = Path(result["bundle_dir"])
    options_file = bundle / ("llm_api_options.yaml" if api == "openai" else "tensorrt_llm/1/model.yaml")
    lora = yaml.safe_load(options_file.read_text())["lora_config"]
    assert len(lora["lora_dir"]) == 2
    for path in lora["lora_dir"]:
        assert (_under_models(bundle, path) / "adapter_config.json").is_file()

"""PyTorch-backend deployables (`pipeline build --backend pytorch`) made from real `pipeline convert
--format hf` checkpoints of a tiny Llama 3.x-shaped model, read as their consumers read them:

- GPU: model/ is the ModelOpt checkpoint itself (hard links: hf_quant_config.json, config.json, the
  quantized safetensors, tokenizer), llm_api_options.yaml's keys are fields of TensorRT-LLM 1.1.0's
  TorchLlmArgs / KvCacheConfig / CudaGraphConfig (pipeline/data/trtllm_llm_args.tsv, read here with csv,
  not with the loader the build uses), and its KV dtype is the checkpoint's kv_cache_quant_algo; the
  config and tokenizer in model/ read under transformers 4.57.1, which TensorRT-LLM 1.1.0 uses.
- CPU: model/ holds the 16-bit source, which transformers 5 (the reference runtime) and 4.57.1 load.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from pipeline.build import BuildSpec
from pipeline.build.pytorch import build_pytorch
from pipeline.convert import ConvertSpec, convert
from pipeline.core.deployable import read_deployable

pytestmark = pytest.mark.slow

TABLE = Path(__file__).resolve().parents[2] / "pipeline" / "data" / "trtllm_llm_args.tsv"
CALIB = {"calib_size": 4, "calib_batch_size": 4, "calib_max_len": 32}


def table_keys() -> dict[str, set[str]]:
    body = "".join(line for line in TABLE.read_text(encoding="utf-8").splitlines(keepends=True) if not line.startswith("#"))
    keys: dict[str, set[str]] = {}
    for row in csv.DictReader(io.StringIO(body), delimiter="\t"):
        keys.setdefault(row["class"], set()).add(row["field"])
    return keys


@pytest.fixture(scope="module")
def fp8_checkpoint(tiny_hf, session_build_root: Path) -> Path:
    return convert(ConvertSpec(model=str(tiny_hf("LlamaForCausalLM")), quant="fp8", kv_cache="fp8", format="hf",
                               root=session_build_root, **CALIB)).path


@pytest.fixture()
def in_session_root(session_build_root: Path, monkeypatch) -> Path:
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(session_build_root))
    return session_build_root


def test_gpu_deployable_is_the_modelopt_checkpoint_with_conforming_options(fp8_checkpoint, in_session_root, probe,
                                                                          tmp_path) -> None:
    deployable = read_deployable(build_pytorch(BuildSpec(gpu="h100", checkpoint=fp8_checkpoint, backend="pytorch")).deploy_dir)
    for path in fp8_checkpoint.iterdir():
        if path.name != "manifest.json":
            assert (deployable.model_dir / path.name).stat().st_ino == path.stat().st_ino, path.name
    quantization = json.loads((deployable.model_dir / "hf_quant_config.json").read_text())["quantization"]
    assert (quantization["quant_algo"], quantization["kv_cache_quant_algo"]) == ("FP8", "FP8")
    options = yaml.safe_load(deployable.options_path.read_text())
    keys = table_keys()
    assert set(options) <= keys["BaseLlmArgs"] | keys["TorchLlmArgs"]
    assert set(options["kv_cache_config"]) <= keys["KvCacheConfig"]
    assert set(options["cuda_graph_config"]) <= keys["CudaGraphConfig"]
    assert options["kv_cache_config"]["dtype"] == "fp8" and "dtype" not in options  # bf16/fp16 weights: "auto"
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps(["The capital of France is"]))
    seen = probe("read", str(deployable.model_dir), str(texts))
    assert seen["transformers"] == "4.57.1" and seen["architectures"] == ["LlamaForCausalLM"]


def test_cpu_deployable_loads_the_16_bit_source_under_both_transformers(fp8_checkpoint, in_session_root, probe) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    deployable = read_deployable(build_pytorch(BuildSpec(gpu="cpu", checkpoint=fp8_checkpoint, backend="pytorch")).deploy_dir)
    assert deployable.simulated == ("fp8", "fp8") and not (deployable.model_dir / "hf_quant_config.json").exists()
    source = Path(json.loads((fp8_checkpoint / "manifest.json").read_text())["hf_dir"])
    assert (deployable.model_dir / "model.safetensors").stat().st_ino == (source / "model.safetensors").stat().st_ino
    model = AutoModelForCausalLM.from_pretrained(deployable.model_dir, dtype=torch.float32)
    assert model.config.num_hidden_layers == 2
    loaded = probe("load", str(deployable.model_dir), json.dumps({"dtype": "float32"}))
    assert loaded["transformers"] == "4.57.1" and loaded["dtype"] == "torch.float32"

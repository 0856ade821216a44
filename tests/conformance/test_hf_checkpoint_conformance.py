"""`pipeline convert --format hf` checkpoints against what TensorRT-LLM's PyTorch backend reads
(pipeline/data/trtllm_pytorch_checkpoint.json: model_config.py @1a0dc5f7 for hf_quant_config.json and
config.json, modules/linear.py @ed53795b for the tensors each quant_algo's linear method loads) and
against transformers 4.57.1, the version TensorRT-LLM 1.1.0 reads the config and tokenizer with.

Every weight format is exported from a tiny Llama 3.x-shaped model (RoPE base 500000 with llama3
scaling, which transformers 4.57.1 loses when only transformers 5's rope_parameters is written), and
fp8 from a tiny model of every other architecture --format hf takes.
This file reads the facts table itself: it does not reuse the checks pipeline.convert.hf_export makes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from pipeline.convert import SUPPORTED_ARCHITECTURES, ConvertResult, ConvertSpec, convert
from tiny_models import LLAMA3_SCALING, TINY

pytestmark = pytest.mark.slow

FACTS = Path(__file__).resolve().parents[2] / "pipeline" / "data" / "trtllm_pytorch_checkpoint.json"
CALIB = {"calib_size": 4, "calib_batch_size": 4, "calib_max_len": 32}
LLAMA = "LlamaForCausalLM"
CASES = [(LLAMA, "bf16", None), (LLAMA, "fp16", "fp8"), (LLAMA, "fp8", "fp8"), (LLAMA, "nvfp4", None), (LLAMA, "int4_awq", None),
         (LLAMA, "w4a8_awq", "fp8"), ("MistralForCausalLM", "fp8", None), ("Qwen2ForCausalLM", "fp8", "fp8")]
SAFETENSORS_DTYPE = {"float16": "F16", "bfloat16": "BF16"}
TEXTS = ["The capital of France is", "<|im_start|>user\nHi there<|im_end|>\n", "naïve café — 東京 🚀"]


@pytest.fixture(scope="module")
def table() -> dict[str, Any]:
    return json.loads(FACTS.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tiny_llama_hf(tiny_hf) -> Path:
    return tiny_hf(LLAMA)


@pytest.fixture(scope="module")
def exported(tiny_hf, session_build_root: Path) -> Callable[..., ConvertResult]:
    done: dict[tuple, ConvertResult] = {}

    def make(quant: str, kv_cache: str | None, architecture: str = LLAMA) -> ConvertResult:
        key = (architecture, quant, kv_cache)
        if key not in done:
            done[key] = convert(ConvertSpec(model=str(tiny_hf(architecture)), quant=quant, kv_cache=kv_cache, format="hf",
                                            root=session_build_root, **CALIB))
        return done[key]

    return make


def test_every_architecture_the_pytorch_backend_loads_is_converted_here(table) -> None:
    loaded = set(table["architectures"]["loaded"])
    assert loaded <= set(SUPPORTED_ARCHITECTURES) and loaded <= set(TINY)
    assert loaded == {architecture for architecture, _, _ in CASES}
    assert set(table["architectures"]["not_loaded"]) == set(SUPPORTED_ARCHITECTURES) - loaded


def tensors(folder: Path) -> dict[str, tuple[str, list[int]]]:
    from safetensors import safe_open

    out: dict[str, tuple[str, list[int]]] = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            out.update({n: (handle.get_slice(n).get_dtype(), list(handle.get_slice(n).get_shape())) for n in handle.keys()})
    return out


def linear_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(out, in) of one Llama decoder layer's linears, from config.json."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config["num_key_value_heads"] * head_dim
    inter = config["intermediate_size"]
    return {"self_attn.q_proj": (heads * head_dim, hidden), "self_attn.k_proj": (kv, hidden), "self_attn.v_proj": (kv, hidden),
            "self_attn.o_proj": (hidden, heads * head_dim), "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden),
            "mlp.down_proj": (hidden, inter)}


def shape_of(formula: str, out: int, in_: int, group_size: Any) -> list[int]:
    """A shape cell of the table ("[out / 2, in]") for one linear."""
    expression = re.sub(r"\bin\b", "in_", formula)
    return [int(v) for v in eval(expression, {"__builtins__": {}}, {"out": out, "in_": in_, "group_size": group_size})]  # noqa: S307


def has_type(value: Any, kind: str) -> bool:
    return any({"null": value is None, "str": isinstance(value, str), "int": type(value) is int,
                "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value)}[k] for k in kind.split("|"))


@pytest.mark.parametrize("architecture, quant, kv_cache", CASES)
def test_quant_config_and_tensors_are_what_the_pytorch_backend_reads(architecture, quant, kv_cache, exported, table,
                                                                      reference_tsv) -> None:
    result = exported(quant, kv_cache, architecture)
    folder = result.path
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    weights = tensors(folder)
    fmt = table["formats"].get(quant)
    cache = table["kv_cache"].get(kv_cache or "auto")

    # config.json: ModelConfig picks the class from architectures[0] and the dtype from torch_dtype (else bfloat16)
    assert config["architectures"] == [architecture]
    assert config["dtype"] == result.dtype
    quant_file = folder / "hf_quant_config.json"
    if fmt is None and cache is None:
        assert not quant_file.exists() and "quantization_config" not in config
        assert {dtype for dtype, _ in weights.values()} == {SAFETENSORS_DTYPE[result.dtype]}
        return

    # hf_quant_config.json: read before config.json's quantization_config; these fields, these types
    data = json.loads(quant_file.read_text(encoding="utf-8"))
    for key in table["hf_quant_config"]["required"]:
        assert isinstance(data.get(key), dict), key
    quantization = data["quantization"]
    for dotted, kind in table["hf_quant_config"]["read"].items():
        value = quantization.get(dotted.split(".", 1)[1])
        assert has_type(value, kind), (dotted, value, kind)
    algos = {row["value"] for row in reference_tsv("trtllm_quant_algos.tsv") if row["kind"] == "quant_algo"}
    kv_algos = {row["value"] for row in reference_tsv("trtllm_quant_algos.tsv") if row["kind"] == "kv_cache_quant_algo"}
    assert quantization["kv_cache_quant_algo"] == (cache["kv_cache_quant_algo"] if cache else None)
    assert quantization["kv_cache_quant_algo"] in kv_algos | {None}
    if fmt is None:  # 16-bit weights, quantized KV cache only
        assert quantization["quant_algo"] is None and quantization.get("group_size") is None
        fmt = {"tensors": {"weight": {"dtype": SAFETENSORS_DTYPE[result.dtype], "shape": "[out, in]"}}, "group_size": None}
    else:
        assert quantization["quant_algo"] == fmt["quant_algo"] and fmt["quant_algo"] in algos
    group_size = result_awq_block(result) if fmt["group_size"] == "awq_block_size" else fmt["group_size"]
    assert quantization.get("group_size") == group_size
    assert quantization["quant_algo"] != "MIXED_PRECISION" or (folder / "quant_cfg.json").is_file()

    # every linear of every layer carries the tensors its linear method loads, in the dtype and shape it allocates
    for layer in range(config["num_hidden_layers"]):
        for linear, (out, in_) in linear_shapes(config).items():
            prefix = f"model.layers.{layer}.{linear}."
            if isinstance(group_size, int):
                assert in_ % group_size == 0, f"{prefix}: in_features {in_} must divide by group_size {group_size}"
            for name, want in fmt["tensors"].items():
                dtype, shape = weights[prefix + name]
                if "dtype" in want:
                    assert dtype == want["dtype"], (prefix + name, dtype)
                assert shape == shape_of(want["shape"], out, in_, group_size), (prefix + name, shape)
            if linear.rsplit(".", 1)[-1] in fmt.get("pre_quant_scale_on", ()):
                dtype, shape = weights[prefix + "pre_quant_scale"]
                assert shape == [in_]
                if fmt.get("pre_quant_scale_dtype") == "model":
                    assert dtype == SAFETENSORS_DTYPE[result.dtype], (prefix, dtype)
        for name, want in (cache or {}).get("tensors", {}).items():
            assert weights[f"model.layers.{layer}.self_attn.{name}"] == (want["dtype"], shape_of(want["shape"], 0, 0, None))

    # what is excluded stays 16-bit
    for module in quantization.get("exclude_modules") or []:
        for name, (dtype, _) in weights.items():
            if name.startswith(module + "."):
                assert dtype == SAFETENSORS_DTYPE[result.dtype], (module, name, dtype)


def result_awq_block(result: ConvertResult) -> int:
    from pipeline.core.artifacts import read_manifest

    return int(read_manifest(result.path)["awq_block_size"])


def test_architectures_supplied_when_the_source_has_none(tiny_llama_hf: Path, session_build_root: Path, tmp_path: Path) -> None:
    # configs written from GGUF name model_type only; TensorRT-LLM picks the class from architectures[0]
    source = tmp_path / "no-architectures"
    shutil.copytree(tiny_llama_hf, source)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    del config["architectures"]
    (source / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (source / "manifest.json").unlink()
    result = convert(ConvertSpec(model=str(source), quant="fp16", format="hf", root=session_build_root))
    assert json.loads((result.path / "config.json").read_text(encoding="utf-8"))["architectures"] == ["LlamaForCausalLM"]


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("texts") / "texts.json"
    path.write_text(json.dumps(TEXTS), encoding="utf-8")
    return path


@pytest.mark.parametrize("quant, kv_cache", [("bf16", None), ("fp8", "fp8")])
def test_config_and_tokenizer_read_the_same_under_4_57(quant, kv_cache, exported, tiny_llama_hf, probe, texts_file) -> None:
    from transformers import AutoConfig, AutoTokenizer

    folder = exported(quant, kv_cache).path
    seen = probe("read", str(folder), str(texts_file))
    assert seen["transformers"] == "4.57.1"
    assert seen["architectures"] == ["LlamaForCausalLM"]
    assert seen["torch_dtype"] == f"torch.{exported(quant, kv_cache).dtype}", "else TensorRT-LLM runs it in bfloat16"
    assert seen["rope_theta"] == 500000.0, "transformers 4.x's default is 10000"
    assert {k: v for k, v in seen["rope_scaling"].items() if k != "type"} == LLAMA3_SCALING
    assert AutoConfig.from_pretrained(folder).rope_parameters == {**LLAMA3_SCALING, "rope_theta": 500000.0}

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert seen["tokenizer_class"] == "PreTrainedTokenizerFast" and seen["eos_token"] == tokenizer.eos_token
    assert seen["ids"] == [tokenizer(text)["input_ids"] for text in TEXTS]
    chat = tokenizer.apply_chat_template([{"role": "user", "content": TEXTS[0]}], add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]
    assert seen["chat_ids"] == list(chat)

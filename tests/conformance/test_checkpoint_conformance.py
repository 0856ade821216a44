"""Every architecture `pipeline convert` supports, converted with fp8 and int8_sq from a tiny model, and
its config.json checked against what TensorRT-LLM's model classes read
(pipeline/data/trtllm_checkpoint_keys.tsv, read from NVIDIA/TensorRT-LLM with commit and symbol per row).

The weights are checked against the config too: TensorRT-LLM allocates every parameter from the config
and `PretrainedModel.load` refuses a checkpoint whose tensors do not match that set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.convert.checkpoint_keys import MISSING, load_rules, lookup, rules_for
from pipeline.convert import SUPPORTED_ARCHITECTURES, ConvertSpec, convert
from tiny_models import TINY

pytestmark = pytest.mark.slow

CALIB = {"calib_size": 4, "calib_batch_size": 4, "calib_max_len": 32}
QUANT_ALGO = {"fp8": "FP8", "int8_sq": "W8A8_SQ_PER_CHANNEL"}


def test_every_supported_architecture_has_facts_and_a_tiny_model() -> None:
    with_rules = {r.architecture for r in load_rules()}
    assert set(SUPPORTED_ARCHITECTURES) <= with_rules
    assert set(SUPPORTED_ARCHITECTURES) == set(TINY)


def expected_from_hf(source: str, hf_config: dict[str, Any], rope: dict[str, Any]) -> Any:
    """What from_hugging_face takes for a hf_source cell of the facts table. RoPE values are the ones
    the tiny model was made with (`rope`), whichever spelling the saved config.json uses."""
    if source.startswith("="):
        text = source[1:]
        return json.loads(text) if text in ("true", "false") else text
    for name in source.split("|"):
        if name in rope:
            return rope[name]
        value = lookup(hf_config, name)
        if value is not MISSING and value is not None:
            return value
    return MISSING


@pytest.mark.parametrize("quant", ["fp8", "int8_sq"])
@pytest.mark.parametrize("architecture", sorted(TINY))
def test_exported_config_has_what_the_model_class_reads(architecture, quant, tiny_hf, session_build_root, reference_tsv) -> None:
    hf_dir = tiny_hf(architecture)
    result = convert(ConvertSpec(model=str(hf_dir), quant=quant, root=session_build_root, **CALIB))
    config = json.loads((result.path / "config.json").read_text(encoding="utf-8"))
    hf_config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    made_with = TINY[architecture][2]
    scaling = made_with.get("rope_scaling")
    rope = {"rope_theta": made_with.get("rope_theta", 10000.0),
            "rope_scaling": None if scaling is None else {**scaling, "type": scaling["rope_type"]},
            "rope_scaling.rope_type": None if scaling is None else scaling["rope_type"]}

    assert config["architecture"] == architecture
    algos = {row["value"] for row in reference_tsv("trtllm_quant_algos.tsv") if row["kind"] == "quant_algo"}
    assert config["quantization"]["quant_algo"] == QUANT_ALGO[quant] and QUANT_ALGO[quant] in algos
    checked = []
    for rule in rules_for(architecture):
        parent, _, children = rule.key.partition(".")
        if children and config.get(parent) is None:
            continue
        found = [lookup(config, f"{parent}.{child}") for child in children.split("|")] if children else [lookup(config, rule.key)]
        value = next((v for v in found if v is not MISSING), MISSING)
        if rule.if_absent == "error":
            assert value is not MISSING, f"{rule.key} is absent; TensorRT-LLM reads it without a default ({rule.source})"
        if rule.allowed and value is not MISSING:
            assert str(value) in rule.allowed, f"{rule.key} = {value!r} not in {rule.allowed} ({rule.source})"
        wanted = expected_from_hf(rule.hf_source, hf_config, rope) if rule.hf_source else MISSING
        if wanted is MISSING or "." in rule.key or (wanted is None and value is MISSING):
            continue
        assert value is not MISSING, f"{rule.key} is absent (TensorRT-LLM would use {rule.upstream_default}); HF says {wanted!r}"
        if isinstance(wanted, float):
            assert value == pytest.approx(wanted, rel=1e-6), (rule.key, rule.source)
        else:
            assert value == wanted, (rule.key, rule.source)
        checked.append(rule.key)
    assert "rotary_base" in checked or architecture == "GPT2LMHeadModel"
    _weights_match_config(result.path, config)


def _weights_match_config(folder: Path, config: dict[str, Any]) -> None:
    from safetensors import safe_open

    with safe_open(str(folder / "rank0.safetensors"), "pt") as handle:
        shapes = {name: list(handle.get_slice(name).get_shape()) for name in handle.keys()}
    layer = "transformer.layers.0."
    heads, kv, head = config["num_attention_heads"], config["num_key_value_heads"], config["head_size"]
    assert shapes[layer + "attention.qkv.weight"] == [(heads + 2 * kv) * head, config["hidden_size"]]
    assert shapes[layer + "mlp.fc.weight"][0] == config["intermediate_size"]
    bias = config.get("attn_bias", config.get("bias", False))
    assert (layer + "attention.qkv.bias" in shapes) == bias, "qkv bias tensors and the config's bias flag disagree"
    learned = config["position_embedding_type"] == "learned_absolute"
    assert ("transformer.position_embedding.weight" in shapes) == learned, "position embedding tensor vs config"


def test_modelopt_alone_leaves_out_qwen_type_and_the_check_names_it(tiny_hf, tmp_path) -> None:
    """What ModelOpt's own config writer gives a Qwen2 model (TensorRT-LLM not installed): refused by name."""
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from transformers import AutoModelForCausalLM

    from pipeline.convert.checkpoint_keys import check_checkpoint_config
    from pipeline.core.errors import InvalidInputError

    hf_dir = tiny_hf("Qwen2ForCausalLM")
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float16)
    with torch.inference_mode():
        export_tensorrt_llm_checkpoint(model, "qwen", torch.float16, export_dir=tmp_path, inference_tensor_parallel=1)
    raw = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert "qwen_type" not in raw
    with pytest.raises(InvalidInputError, match="lacks qwen_type") as refused:
        check_checkpoint_config(raw)
    assert refused.value.exit_code == 2

"""pipeline.convert.checkpoint_keys on hand-made configs: the facts table's shape and provenance, what
completion fixes, what the check refuses (by key). Real exports are checked in tests/conformance/."""

from __future__ import annotations

import re

import pytest

from pipeline.convert.checkpoint_keys import FACTS, check_checkpoint_config, complete_checkpoint_config, load_rules, rules_for
from pipeline.convert import SUPPORTED_ARCHITECTURES
from pipeline.core.errors import InvalidInputError

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
HF_LLAMA31 = {  # Llama 3.1 8B's shape, as transformers 5 saves it
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "head_dim": 128, "attention_bias": False, "mlp_bias": False,
    "rope_parameters": {**LLAMA3, "rope_theta": 500000.0},
}


def trtllm_config(**overrides: object) -> dict:
    """A checkpoint config.json for HF_LLAMA31 with every key its class reads."""
    config = {
        "architecture": "LlamaForCausalLM", "dtype": "bfloat16", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "max_position_embeddings": 131072, "norm_epsilon": 1e-05, "head_size": 128, "hidden_act": "silu",
        "position_embedding_type": "rope_gpt_neox", "rotary_base": 500000.0, "rotary_scaling": {**LLAMA3, "type": "llama3"},
        "attn_bias": False, "mlp_bias": False, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None},
    }
    config.update(overrides)
    return {k: v for k, v in config.items() if v is not ...}


def test_facts_name_their_upstream_source_for_every_row() -> None:
    header = [line for line in FACTS.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    names = {m.group(1) for line in header if (m := re.match(r"#   (\w+)\s+tensorrt_llm/\S+\.py", line))}
    assert {"modeling_utils", "qwen_config", "qwen_model", "llama", "gemma", "gpt", "functional"} <= names
    assert all(re.search(r"@[0-9a-f]{12}", line) for line in header if re.match(r"#   \w+\s+tensorrt_llm/models", line))
    for rule in load_rules():
        assert rule.source.split()[0] in names, rule
        assert rule.if_absent in ("error", "default"), rule
    assert set(SUPPORTED_ARCHITECTURES) <= {r.architecture for r in load_rules()}


def test_a_complete_config_passes_and_rules_merge_with_pretrained_config() -> None:
    check_checkpoint_config(trtllm_config(), HF_LLAMA31)
    keys = [r.key for r in rules_for("Qwen2ForCausalLM")]
    assert "qwen_type" in keys and "architecture" in keys and keys.count("norm_epsilon") == 1


def test_completion_repairs_what_tensorrt_llm_from_hugging_face_reads_under_transformers_5() -> None:
    # transformers 5's config has no rope_theta attribute and answers rope_scaling with rope_parameters:
    # TensorRT-LLM's LLaMAConfig.from_hugging_face then writes its default base and that dict.
    config = trtllm_config(rotary_base=10000.0, rotary_scaling={**LLAMA3, "rope_theta": 500000.0})
    with pytest.raises(InvalidInputError, match=r"rotary_base .* 10000\.0.*rope_theta says 500000\.0"):
        check_checkpoint_config(config, HF_LLAMA31)
    changes = complete_checkpoint_config(config, HF_LLAMA31)
    assert config["rotary_base"] == 500000.0 and config["rotary_scaling"] == {**LLAMA3, "type": "llama3"}
    assert [c.split(":")[0] for c in changes] == ["rotary_base", "rotary_scaling"]
    check_checkpoint_config(config, HF_LLAMA31)


def test_plain_rope_copied_as_scaling_default_is_removed_and_refused_if_left() -> None:
    smol = {**HF_LLAMA31, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}
    config = trtllm_config(rotary_base=10000.0, rotary_scaling={"rope_type": "default", "rope_theta": 100000.0})
    with pytest.raises(InvalidInputError, match="rotary_scaling.type"):
        check_checkpoint_config(config)  # RotaryScalingType.from_string has no "default"
    complete_checkpoint_config(config, smol)
    assert config["rotary_scaling"] is None and config["rotary_base"] == 100000.0
    check_checkpoint_config(config, smol)


@pytest.mark.parametrize("config, needles", [
    (trtllm_config(architecture="Qwen2ForCausalLM"), ["lacks qwen_type", "QWenDecoderLayer"]),
    (trtllm_config(architecture="Qwen2ForCausalLM", qwen_type="qwen9"), ["qwen_type", '"qwen9"', "qwen2_moe"]),
    (trtllm_config(architecture="LlamaForCausalLMX"), ["architecture", "MODEL_MAP"]),
    (trtllm_config(position_embedding_type="rope"), ["position_embedding_type", '"rope"', "rope_gpt_neox"]),
    (trtllm_config(hidden_size=...), ["lacks hidden_size", "PretrainedConfig.__init__"]),
    (trtllm_config(rotary_scaling={"factor": 8.0}), ["lacks rotary_scaling.type"]),
])
def test_check_names_the_key_the_model_class_rejects(config, needles) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check_checkpoint_config(config)
    assert refused.value.exit_code == 2
    for needle in needles:
        assert needle in str(refused.value), str(refused.value)


def test_check_against_the_hf_config_refuses_shapes_and_values_it_would_not_rewrite() -> None:
    with pytest.raises(InvalidInputError, match=r"num_key_value_heads .* is 32.*says 8"):
        check_checkpoint_config(trtllm_config(num_key_value_heads=32), HF_LLAMA31)
    config = trtllm_config(num_key_value_heads=32)
    complete_checkpoint_config(config, HF_LLAMA31)
    assert config["num_key_value_heads"] == 32, "shape keys are never rewritten"

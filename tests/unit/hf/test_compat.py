"""pipeline.hf.compat: RoPE read the same from either transformers generation's config.json, spellings
that disagree refused, and a folder given the keys transformers 4.57.1 reads. Both generations read
real folders in tests/conformance/test_transformers_generations.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.hf.compat import compatible_tokenizer_config, make_folder_compatible, rope_settings

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
HF_CONFIG = {"architectures": None, "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
             "rope_parameters": {**LLAMA3, "rope_theta": 500000.0}}


def test_rope_settings_read_both_generations_the_same() -> None:
    v5 = rope_settings({"rope_parameters": {**LLAMA3, "rope_theta": 500000.0}})
    v4 = rope_settings({"rope_theta": 500000, "rope_scaling": {**LLAMA3, "type": "llama3"}})
    both = rope_settings({"rope_theta": 500000.0, "rope_scaling": LLAMA3, "rope_parameters": {**LLAMA3, "rope_theta": 500000.0}})
    assert v5 == v4 == both and v5.theta == 500000.0 and v5.scaling_type == "llama3"
    assert rope_settings({"rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}).scaling is None
    assert rope_settings({"rope_theta": 1e6, "rope_scaling": None}).scaling is None


@pytest.mark.parametrize("config, needle", [
    ({"rope_theta": 10000.0, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}, "two different RoPE bases"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_parameters": {"rope_theta": 1.0, "rope_type": "default"}},
     "Keep the same RoPE scaling"),
    ({"rope_scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0}}, "rope_type 'linear' but type 'dynamic'"),
])
def test_rope_spellings_that_disagree_are_refused(config, needle) -> None:
    with pytest.raises(InvalidInputError) as refused:
        rope_settings(config)
    assert needle in str(refused.value)


def test_folder_gets_the_keys_transformers_4_reads(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend", "eos_token": "</s>"}))
    changes = make_folder_compatible(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["rope_theta"] == 500000.0 and config["rope_scaling"] == LLAMA3
    assert config["rope_parameters"] == HF_CONFIG["rope_parameters"] and config["architectures"] == ["LlamaForCausalLM"]
    tokenizer = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tokenizer == {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>"}
    assert len(changes) == 4 and make_folder_compatible(tmp_path) == []


def test_generic_tokenizer_class_without_tokenizer_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="needs tokenizer.json"):
        compatible_tokenizer_config(tmp_path, {"tokenizer_class": "TokenizersBackend"})
    assert compatible_tokenizer_config(tmp_path, {"tokenizer_class": "LlamaTokenizer"}) == ({"tokenizer_class": "LlamaTokenizer"}, [])

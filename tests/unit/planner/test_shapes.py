"""pipeline.planner.shapes: ModelSpec from an HF config.json (parameter counts, GQA, tied embeddings), refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.core.errors import InvalidInputError, UnsupportedError

from planner_cases import LLAMA_8B, write_config

SMOLLM2_SHAPES = {  # SmolLM2-135M: tied embeddings, GQA 9/3, head_dim 64; 134,515,008 parameters
    "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
    "max_position_embeddings": 8192, "dtype": "float32",
}


def test_llama8b_shapes_and_parameter_count(llama8b: P.ModelSpec) -> None:
    assert (llama8b.num_layers, llama8b.num_heads, llama8b.num_kv_heads, llama8b.head_dim) == (32, 32, 8, 128)
    assert llama8b.param_count == 8_030_261_248  # Meta's published 8.03 B, embeddings and lm_head included
    assert P.model_spec_from_config(LLAMA_8B / "config.json") == llama8b  # the file works as well as the folder


def test_tied_embeddings_and_head_dim_fallback(tmp_path: Path) -> None:
    model = P.model_spec_from_config(write_config(tmp_path, **SMOLLM2_SHAPES))
    assert model.head_dim == 64  # no head_dim in config: hidden / heads
    assert model.lm_head_params == 0
    assert model.param_count == 134_515_008
    untied = P.model_spec_from_config(write_config(tmp_path, **{**SMOLLM2_SHAPES, "tie_word_embeddings": False}))
    assert untied.param_count - model.param_count == 49152 * 576


def test_missing_or_foreign_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="config.json"):
        P.model_spec_from_config(tmp_path)
    with pytest.raises(UnsupportedError, match="hidden_size"):
        P.model_spec_from_config(write_config(tmp_path, model_type="bert", vocab_size=10))

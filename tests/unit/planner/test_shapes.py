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


# Small configs of each MoE family the planner reads (and two dense ones with quirks), built as transformers' own model
# classes: the planner's parameter counts must be theirs. Each family spells its experts differently (see
# shapes._moe_shape): Qwen2-MoE here has a shared expert with its gate, a dense layer by decoder_sparse_step and one by
# mlp_only_layers; Llama 4 alternates dense and MoE layers (interleave_moe_layer_step) with a shared expert.
_FAMILIES = {
    "MixtralForCausalLM": ("MixtralConfig", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                                 num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                                 num_experts_per_tok=2, vocab_size=256, tie_word_embeddings=False)),
    "Qwen2MoeForCausalLM": ("Qwen2MoeConfig", dict(hidden_size=64, intermediate_size=160, moe_intermediate_size=32,
                                                   shared_expert_intermediate_size=80, num_hidden_layers=4,
                                                   num_attention_heads=4, num_key_value_heads=2, num_experts=6,
                                                   num_experts_per_tok=2, decoder_sparse_step=2, mlp_only_layers=[3],
                                                   vocab_size=256, tie_word_embeddings=False)),
    "Qwen3MoeForCausalLM": ("Qwen3MoeConfig", dict(hidden_size=64, intermediate_size=160, moe_intermediate_size=32,
                                                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                                   head_dim=32, num_experts=6, num_experts_per_tok=2, vocab_size=256)),
    "Llama4ForCausalLM": ("Llama4TextConfig", dict(hidden_size=64, intermediate_size=48, intermediate_size_mlp=96,
                                                   num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                                   head_dim=16, num_local_experts=4, num_experts_per_tok=1,
                                                   interleave_moe_layer_step=2, vocab_size=256)),
    "DeepseekV3ForCausalLM": ("DeepseekV3Config", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                                       num_hidden_layers=3, first_k_dense_replace=1, n_routed_experts=4,
                                                       n_shared_experts=1, num_experts_per_tok=2, num_attention_heads=4,
                                                       num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=24,
                                                       qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, vocab_size=256,
                                                       n_group=1, topk_group=1)),
    "Qwen2ForCausalLM": ("Qwen2Config", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                             tie_word_embeddings=False)),
    "Qwen3ForCausalLM": ("Qwen3Config", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256)),
}


@pytest.mark.parametrize("architecture", sorted(_FAMILIES))
def test_parameter_counts_match_transformers_model_classes(architecture: str) -> None:
    """Total parameters as the transformers class holds them; the weights one token runs through (ours: attention, the
    top-k routed experts, the shared expert, the router; embeddings, norms and lm_head apart) as the class's
    non-expert linear weights plus k/E of its routed experts' weights."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config_name, values = _FAMILIES[architecture]
    config = getattr(transformers, config_name)(**values)
    with torch.device("meta"):
        model = getattr(transformers, architecture)(config)
    params = dict(model.named_parameters())
    spec = P.model_spec_from_dict(config.to_dict(), architecture)
    assert spec.param_count == sum(p.numel() for p in params.values())
    linear = {n: p.numel() for n, p in params.items() if not any(k in n for k in ("embed", "lm_head", "norm"))}
    routed = sum(v for n, v in linear.items() if ".experts" in n)
    share = spec.experts_per_token / spec.num_experts if spec.num_experts > 1 else 1.0
    assert spec.active_params_per_token == pytest.approx(sum(linear.values()) - routed * (1 - share), abs=1)


@pytest.mark.parametrize("config_name", ["JambaConfig", "BambaConfig", "FalconH1Config", "NemotronHConfig",
                                         "GraniteMoeHybridConfig", "Zamba2Config", "Qwen3NextConfig", "Lfm2Config",
                                         "RecurrentGemmaConfig"])
def test_hybrid_models_are_refused(config_name: str) -> None:
    """Mamba, linear-attention, convolution and recurrent layers hold no KV cache and run no attention: planned as
    attention they would misstate memory and speed, so the planner says it does not model them (transformers' own
    config classes, as their checkpoints ship them)."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, config_name):
        pytest.skip(f"transformers {transformers.__version__} has no {config_name}")
    hybrid = {"Lfm2Config": dict(num_hidden_layers=2, layer_types=["conv", "full_attention"])}  # its default: all attention
    config = getattr(transformers, config_name)(**hybrid.get(config_name, {})).to_dict()
    with pytest.raises(UnsupportedError, match="mixes attention with"):
        P.model_spec_from_dict(config, config_name)


@pytest.mark.parametrize(("config_name", "values"), [
    ("Gemma2Config", dict(num_hidden_layers=5, sliding_window=4096)),
    ("Gemma3TextConfig", dict(num_hidden_layers=13, sliding_window=1024)),
    ("GptOssConfig", dict(num_hidden_layers=4, num_local_experts=4, sliding_window=128)),
    ("MistralConfig", dict(num_hidden_layers=3, sliding_window=4096)),
])
def test_sliding_windows_are_the_layers_transformers_windows(config_name: str, values: dict) -> None:
    """Each layer's window as transformers' own config class lays the layers out (layer_types); Gemma 2 and 3 configs
    written before layer_types existed give the same windows from their family's rule."""
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, config_name)(**values).to_dict()
    window = values["sliding_window"]
    types = config.get("layer_types") or ["sliding_attention"] * values["num_hidden_layers"]  # Mistral: every layer
    expected = tuple(window if kind == "sliding_attention" else 0 for kind in types)
    spec = P.model_spec_from_dict(config, config_name)
    assert spec.sliding_windows == expected and 0 < sum(map(bool, expected)) <= values["num_hidden_layers"]
    if config["model_type"].startswith("gemma"):
        legacy = {k: v for k, v in config.items() if k != "layer_types"}
        assert P.model_spec_from_dict(legacy, config_name).sliding_windows == expected
    assert spec.attended_tokens(window // 2) == window // 2  # shorter than every window: every layer sees it all
    full = expected.count(0)
    assert spec.attended_tokens(4 * window) == pytest.approx((full * 4 * window + (len(expected) - full) * window) / len(expected))


def test_models_without_a_window_attend_to_the_whole_context(tmp_path: Path) -> None:
    assert P.model_spec_from_config(LLAMA_8B).sliding_windows == ()
    no_window = P.model_spec_from_dict({**SMOLLM2_SHAPES, "model_type": "mistral", "sliding_window": None}, "mistral-v0.3")
    assert no_window.sliding_windows == () and no_window.attended_tokens(9000) == 9000
    qwen3 = {**SMOLLM2_SHAPES, "model_type": "qwen3", "sliding_window": 4096, "layer_types": ["full_attention"] * 30}
    assert P.model_spec_from_dict(qwen3, "qwen3").sliding_windows == ()  # use_sliding_window off: every layer full


def test_llama4_chunked_layers_are_its_rope_layers() -> None:
    """Llama 4 runs chunked attention on its RoPE layers (transformers' layer_types "chunked_attention"; without it,
    no_rope_layers or every layer but each fourth); a decoding token at position p sees (p mod C) + 1 tokens of them."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Llama4TextConfig(num_hidden_layers=8, attention_chunk_size=8192).to_dict()
    expected = tuple(8192 if kind == "chunked_attention" else 0 for kind in config["layer_types"])
    assert expected == (8192, 8192, 8192, 0) * 2
    assert P.model_spec_from_dict(config, "llama4").attention_chunks == expected
    for drop in (("layer_types",), ("layer_types", "no_rope_layers")):  # older configs: the same layers
        legacy = {k: v for k, v in config.items() if k not in drop}
        assert P.model_spec_from_dict(legacy, "llama4").attention_chunks == expected
    spec = P.model_spec_from_dict(config, "llama4")
    assert spec.attended_tokens(5000) == 5000  # within the first chunk every layer sees it all
    assert spec.attended_tokens(21000) == pytest.approx((2 * 21000 + 6 * (21000 - 2 * 8192)) / 8)
    assert spec.attended_tokens(10000, prefill=True) == pytest.approx((2 * 10000 + 6 * 4096) / 8)
    qwen = P.model_spec_from_dict({**SMOLLM2_SHAPES, "model_type": "qwen3", "attention_chunk_size": 8192}, "qwen3")
    assert qwen.attention_chunks == ()  # only Llama 4 chunks its attention

"""The tiny models of tests/conformance (imported by its conftest and tests)."""

from __future__ import annotations

from typing import Any

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 256}
_SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
              vocab_size=49152, max_position_embeddings=512, bos_token_id=1, eos_token_id=2)

# architecture -> (config class, model class, config arguments). Each exercises a key its TensorRT-LLM
# class reads: Llama 3.x RoPE (base 500000, llama3 scaling), Mistral's and Qwen2's base 1e6, Qwen2's
# qkv bias and qwen_type, Gemma's head_dim != hidden / heads, GPT-2's learned positions and n_inner.
TINY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "LlamaForCausalLM": ("LlamaConfig", "LlamaForCausalLM", dict(_SMALL, rope_theta=500000.0, rope_scaling=LLAMA3_SCALING)),
    "MistralForCausalLM": ("MistralConfig", "MistralForCausalLM", dict(_SMALL, rope_theta=1000000.0, sliding_window=None)),
    "Qwen2ForCausalLM": ("Qwen2Config", "Qwen2ForCausalLM", dict(_SMALL, rope_theta=1000000.0, rms_norm_eps=1e-6)),
    "GemmaForCausalLM": ("GemmaConfig", "GemmaForCausalLM", dict(_SMALL, head_dim=32)),
    "GPT2LMHeadModel": ("GPT2Config", "GPT2LMHeadModel",
                        dict(n_embd=64, n_layer=2, n_head=4, vocab_size=49152, n_positions=512, bos_token_id=1, eos_token_id=2)),
}

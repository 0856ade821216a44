"""pipeline.planner.memory: weight and KV bytes per precision, the KV capacity of a Scenario."""

from __future__ import annotations

import pytest

from pipeline import planner as P


def test_weight_bytes_per_precision(llama8b: P.ModelSpec) -> None:
    fp16 = P.weight_bytes(llama8b, "fp16")
    assert fp16 == pytest.approx(2 * llama8b.param_count, rel=1e-6)
    fp8 = P.weight_bytes(llama8b, "fp8")
    embeddings = 2 * llama8b.vocab_size * llama8b.hidden_size  # embedding table + lm_head stay 16-bit
    assert fp8 == pytest.approx(llama8b.num_layers * llama8b.matmul_params_per_layer + 2 * embeddings, rel=0.01)
    awq, wo4 = P.weight_bytes(llama8b, "int4_awq"), P.weight_bytes(llama8b, "int4_wo")
    linear = llama8b.num_layers * llama8b.matmul_params_per_layer
    assert awq - wo4 == pytest.approx(linear * 16 / 128 / 8, rel=0.01)  # one 16-bit scale per 128 weights
    assert P.weight_bytes(llama8b, "nvfp4") > wo4  # FP8 scale per 16 weights
    assert fp16 > P.weight_bytes(llama8b, "int8_wo") > awq


def test_kv_bytes_per_token_is_gqa_aware(llama8b: P.ModelSpec) -> None:
    assert P.kv_bytes_per_token(llama8b) == 2 * 32 * 8 * 128 * 2 == 131072
    assert P.kv_bytes_per_token(llama8b, "fp8") == 65536
    assert P.kv_bytes_per_token(llama8b, "fp8", tp=2) == 32768
    assert P.kv_bytes_per_token(llama8b, None, tp=16) == 2 * 32 * 1 * 128 * 2  # one KV head per rank, replicated


def test_memory_plan_capacity(llama8b: P.ModelSpec) -> None:
    scenario = P.Scenario(llama8b, "h100", "fp8", "fp8", 1, 1024, 1024)
    memory = P.memory_plan(scenario, kv_fraction=0.9)
    expected_tokens = memory.free_gib * P.GIB * 0.9 / 65536
    assert memory.kv_capacity_tokens == pytest.approx(expected_tokens, rel=1e-3)
    assert memory.max_sequences == memory.kv_capacity_tokens // 2048
    more = P.memory_plan(scenario, kv_fraction=0.95)
    assert more.max_sequences > memory.max_sequences

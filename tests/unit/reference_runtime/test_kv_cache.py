"""The reference runtime's KV-cache budget, admission policies and parameter reading (no model, no server)."""

from __future__ import annotations

import json

import pytest

from pipeline.reference_runtime.kv_cache import (Admission, KvCacheBudget, KvCacheError, blocks_for, kv_bytes_per_token,
                                                 plan_kv_cache)
from pipeline.reference_runtime.requests import EngineLimits
from pipeline.reference_runtime.settings import GPU_ONLY, SettingsError, limits_from_llm_options, read_settings

GIB = 1 << 30
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
           "hidden_size": 576}


def _plan(**overrides):
    budget = {key: overrides.pop(key) for key in ("free_memory_bytes", "free_fraction", "max_tokens") if key in overrides}
    values = dict(tokens_per_block=32, bytes_per_token=46_080, max_batch_size=8, max_seq_len=512)
    values.update(overrides)
    return plan_kv_cache(KvCacheBudget(**{"free_memory_bytes": 16 * GIB, **budget}), **values)


def test_bytes_per_token_is_k_and_v_of_every_layer() -> None:
    from types import SimpleNamespace

    assert kv_bytes_per_token(SimpleNamespace(**SMOLLM2), 4) == 2 * 30 * 3 * 64 * 4 == 46_080
    no_head_dim = {k: v for k, v in SMOLLM2.items() if k != "head_dim"}
    assert kv_bytes_per_token(SimpleNamespace(**no_head_dim), 2) == 2 * 30 * 3 * 64 * 2


def test_budget_is_the_smaller_of_max_tokens_and_the_memory_fraction() -> None:
    # max_tokens below the memory budget: max_tokens decides (whole blocks)
    plan = _plan(max_tokens=256)
    assert (plan.blocks, plan.tokens) == (8, 256) and "max_tokens_in_paged_kv_cache 256" in plan.source
    assert _plan(max_tokens=250).tokens == 224  # 7 whole blocks
    # the memory fraction below max_tokens: memory decides
    small = _plan(free_memory_bytes=100 * 46_080, free_fraction=0.5, max_tokens=4096)
    assert small.tokens == 32 and "0.5 x" in small.source and "below max_tokens_in_paged_kv_cache 4096" in small.source
    # neither given small: capped at what the batch can ever hold (max_batch_size x max_seq_len)
    big = _plan()
    assert big.tokens == 8 * 512 and "max_batch_size 8 x max_seq_len 512" in big.source
    assert big.bytes == 8 * 512 * 46_080


def test_budget_below_one_block_and_bad_fractions_are_refused() -> None:
    with pytest.raises(KvCacheError, match="less than one block of 32"):
        _plan(max_tokens=31)
    with pytest.raises(KvCacheError, match="less than one block"):
        _plan(free_memory_bytes=0)
    with pytest.raises(KvCacheError, match=r"must be in \(0, 1\]"):
        _plan(free_fraction=1.5)
    assert blocks_for(64, 32) == 2 and blocks_for(65, 32) == 3 and blocks_for(0, 32) == 1


def test_guaranteed_no_evict_reserves_whole_requests_first_come_first_served() -> None:
    admission = Admission(total_blocks=8, max_active=8)
    for name, blocks in (("a", 3), ("b", 3), ("c", 3), ("d", 1)):
        admission.queue(name, blocks)
    assert admission.ready() == ["a", "b"]  # c would need 9 of 8 blocks; d may not overtake it
    assert (admission.active, admission.waiting, admission.reserved_blocks) == (2, 2, 6)
    admission.release("a")
    assert admission.ready() == ["c", "d"]
    assert admission.reserved_blocks == 7 and admission.waiting == 0
    assert admission.fits_at_all(8) and not admission.fits_at_all(9)


def test_slots_cap_max_utilization_and_static_batching() -> None:
    slots = Admission(total_blocks=100, max_active=2, policy="max_utilization")
    for name in "abc":
        slots.queue(name, 60)  # blocks are the manager's business under max_utilization
    assert slots.ready() == ["a", "b"] and slots.reserved_blocks == 0
    slots.release("a")
    assert slots.ready() == ["c"]

    static = Admission(total_blocks=100, max_active=2, batching="static")
    for name in "abc":
        static.queue(name, 1)
    assert static.ready() == ["a", "b"]
    static.release("a")
    assert static.ready() == []  # V1: b still runs, so c waits for the whole batch
    static.release("b")
    assert static.ready() == ["c"]
    assert static.drop("zzz") is False


def test_cancelled_waiting_request_leaves_the_queue() -> None:
    admission = Admission(total_blocks=2, max_active=1)
    admission.queue("a", 2)
    admission.queue("b", 2)
    assert admission.ready() == ["a"]
    assert admission.drop("b") is True and admission.waiting == 0
    admission.release("a")
    assert admission.ready() == [] and admission.active == 0


def _rendered(**overrides) -> dict:
    """The parameters `pipeline render` writes (string_value form), with overrides."""
    values = {"gpt_model_type": "inflight_fused_batching", "batch_scheduler_policy": "guaranteed_no_evict",
              "kv_cache_free_gpu_mem_fraction": "0.9", "enable_chunked_context": "false",
              "enable_kv_cache_reuse": "false", "cancellation_check_period_ms": "100", "stats_check_period_ms": "100",
              "exclude_input_in_output": "false", "multi_block_mode": "true", "gpu_weights_percent": "1.0"}
    values.update(overrides)
    return {k: {"string_value": v} for k, v in values.items()}


def test_rendered_defaults_are_read_and_each_ignored_setting_is_named() -> None:
    settings = read_settings(_rendered())
    assert (settings.batching, settings.scheduler_policy, settings.kv_cache_free_mem_fraction) == (
        "inflight", "guaranteed_no_evict", 0.9)
    assert settings.max_tokens_in_paged_kv_cache is None and not settings.enable_chunked_context
    honoured, ignored = " | ".join(settings.honoured), " | ".join(settings.ignored)
    assert "batch_scheduler_policy guaranteed_no_evict" in honoured and "in-flight batching" in honoured
    assert "enable_chunked_context false" in ignored and "always splits a prompt" in ignored
    assert "GPU-only settings" in ignored and "multi_block_mode" in ignored and "gpu_weights_percent" in ignored
    assert set(GPU_ONLY) >= {"multi_block_mode", "gpu_weights_percent"}


def test_settings_that_change_the_runtime() -> None:
    settings = read_settings(_rendered(gpt_model_type="V1", batch_scheduler_policy="max_utilization",
                                       kv_cache_free_gpu_mem_fraction="0.5", max_tokens_in_paged_kv_cache="2048",
                                       enable_chunked_context="true", enable_kv_cache_reuse="true"))
    assert (settings.batching, settings.scheduler_policy) == ("static", "max_utilization")
    assert (settings.kv_cache_free_mem_fraction, settings.max_tokens_in_paged_kv_cache) == (0.5, 2048)
    assert settings.enable_chunked_context and settings.enable_kv_cache_reuse
    assert not any("chunked" in line for line in settings.ignored)
    # NVIDIA's unfilled placeholders and empty values take the defaults
    assert read_settings(_rendered(max_tokens_in_paged_kv_cache="${max_tokens_in_paged_kv_cache}")) \
        .max_tokens_in_paged_kv_cache is None
    assert read_settings({}).scheduler_policy == "guaranteed_no_evict"


def test_invalid_settings_fail_as_the_backend_fails_or_fall_back_as_it_does() -> None:
    with pytest.raises(SettingsError, match="Invalid gpt_model_type 'static'"):
        read_settings(_rendered(gpt_model_type="static"))
    with pytest.raises(SettingsError, match=r"kv_cache_free_gpu_mem_fraction must be in \(0, 1\]"):
        read_settings(_rendered(kv_cache_free_gpu_mem_fraction="0"))
    with pytest.raises(SettingsError, match="is not a whole number"):
        read_settings(_rendered(max_tokens_in_paged_kv_cache="lots"))
    with pytest.raises(SettingsError, match="is not a boolean"):
        read_settings(_rendered(enable_chunked_context="maybe"))
    fallback = read_settings(_rendered(batch_scheduler_policy="fair_share"))
    assert fallback.scheduler_policy == "guaranteed_no_evict"
    assert any("'fair_share'" in line for line in fallback.ignored)


def test_llm_options_defaults_come_from_the_checkpoint_and_engine_limits(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    limits, honoured, ignored = limits_from_llm_options({"model": str(tmp_path), "backend": "pytorch"}, {})
    assert limits == EngineLimits(max_batch_size=8, max_input_len=4096, max_seq_len=4096, max_num_tokens=8192,
                                  tokens_per_block=32, kv_cache_free_mem_fraction=0.9, enable_kv_cache_reuse=False,
                                  scheduler_policy="guaranteed_no_evict", cancellation_check_period_ms=100)
    assert honoured == ["max_batch_size=8", "max_num_tokens=8192", "max_seq_len=4096", "max_input_len=4096",
                        "tokens_per_block=32", "kv_cache_free_mem_fraction=0.9", "enable_kv_cache_reuse=False",
                        "scheduler_policy=guaranteed_no_evict", "cancellation_check_period_ms=100"]
    assert ignored == []
    (tmp_path / "config.json").write_text("{}")  # no max_position_embeddings: 2048
    assert limits_from_llm_options({"model": str(tmp_path), "max_batch_size": 0}, {})[0].max_seq_len == 2048


def test_llm_options_that_change_the_runtime_and_those_ignored() -> None:
    options = {"model": "unread", "max_batch_size": 4, "max_num_tokens": "512", "max_seq_len": 300,
               "tensor_parallel_size": 2, "scheduler_config": {"capacity_scheduler_policy": "MAX_UTILIZATION"},
               "kv_cache_config": {"tokens_per_block": 16, "free_gpu_memory_fraction": 0.5, "max_tokens": 1000,
                                   "enable_block_reuse": True, "dtype": "fp8"}}
    limits, honoured, ignored = limits_from_llm_options(options, {"cancellation_check_period_ms": 50})
    assert limits == EngineLimits(max_batch_size=4, max_input_len=300, max_seq_len=300, max_num_tokens=512,
                                  tokens_per_block=16, max_tokens_in_paged_kv_cache=1000, kv_cache_free_mem_fraction=0.5,
                                  enable_kv_cache_reuse=True, scheduler_policy="max_utilization",
                                  cancellation_check_period_ms=50)
    assert "max_tokens_in_paged_kv_cache=1000" in honoured and "scheduler_policy=max_utilization" in honoured
    assert ignored == ["tensor_parallel_size (a GPU setting of TensorRT-LLM's PyTorch backend)",
                       "kv_cache_config.dtype (the reference runtime's KV cache is float32; a quantized KV cache is "
                       "simulated from triton_config.simulated)"]
    fallback, _, ignored = limits_from_llm_options(
        {"model": "unread", "max_seq_len": 300, "max_input_len": 100,
         "scheduler_config": {"capacity_scheduler_policy": "STATIC_BATCH"}}, {})
    assert (fallback.scheduler_policy, fallback.max_input_len) == ("guaranteed_no_evict", 100)
    assert ignored == ["scheduler_config.capacity_scheduler_policy=static_batch (guaranteed_no_evict used)"]


def test_per_request_prefill_attention_equals_the_packed_block_diagonal_one() -> None:
    """A packed step (two prompts being prefilled, one of them after a cached prefix, and a decode row) gives
    the same attention request by request as transformers' sdpa over the block-diagonal mask."""
    import torch
    from transformers.generation.continuous_batching.utils import build_attention_mask
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from pipeline.reference_runtime.attention import per_request_sdpa

    torch.manual_seed(0)
    heads, kv_heads, dim = 9, 3, 16
    q_bounds, k_bounds = [0, 5, 6, 13], [0, 9, 13, 20]  # prompt of 5 after 4 cached, a decode row, a fresh prompt of 7
    query = torch.randn(1, heads, q_bounds[-1], dim)
    key, value = torch.randn(1, kv_heads, k_bounds[-1], dim), torch.randn(1, kv_heads, k_bounds[-1], dim)
    mask = torch.full((1, 1, q_bounds[-1], k_bounds[-1]), torch.finfo(torch.float32).min)
    build_attention_mask(mask, q_bounds, k_bounds)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = heads // kv_heads, True
    kwargs = {"cu_seq_lens_q": torch.tensor(q_bounds), "cu_seq_lens_k": {"full_attention": torch.tensor(k_bounds)},
              "max_length_q": 7}
    packed, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=dim ** -0.5, **kwargs)
    split, _ = per_request_sdpa(module, query, key, value, mask, scaling=dim ** -0.5, **kwargs)
    assert split.shape == packed.shape == (1, q_bounds[-1], heads, dim)
    assert torch.allclose(split, packed, atol=1e-5)
    # not the manager's call (no cu_seq_lens_q): transformers' own path, untouched
    plain, _ = per_request_sdpa(module, query, key, value, mask, scaling=dim ** -0.5)
    assert torch.equal(plain, packed)

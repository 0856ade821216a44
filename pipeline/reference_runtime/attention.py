"""Prefill attention one request at a time, for transformers' continuous batching on the CPU.

The batching manager packs every request of a step into one sequence and runs sdpa over all of it
with a block-diagonal mask. For decode steps that costs little (one query row per request). For a
step that prefills several prompts it computes every prompt's queries against every other prompt's
keys only to mask them out: 8 prompts of 64 tokens cost 8x the attention of 8 separate prompts
(~0.3 s of a ~7 s wave of 8 requests on one core, measured with scripts/bench_runtime.py). Here each
request's queries attend to its own keys, with its own block of the manager's mask, so the result is
the same attention; steps with one request, or decode rows only, take transformers' own path.

Installed for the process by `install()` (the Triton stub of the tensorrt_llm model runs one model);
calls that do not come from the batching manager (no `cu_seq_lens_q`) go to transformers' sdpa unchanged.
"""

from __future__ import annotations

from typing import Any

_INSTALLED = False


def install() -> None:
    """Make "sdpa" attention split multi-request prefill steps (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ALL_ATTENTION_FUNCTIONS["sdpa"] = per_request_sdpa
    _INSTALLED = True


def _segments(kwargs: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """(query bounds, key bounds) of the requests in a packed step, or None when not one of the manager's."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if isinstance(cu_k, dict):  # one entry per attention type; more than one (sliding windows): not handled here
        cu_k = next(iter(cu_k.values())) if len(cu_k) == 1 else None
    if cu_q is None or cu_k is None:
        return None
    return cu_q.tolist(), cu_k.tolist()


def per_request_sdpa(module, query, key, value, attention_mask, **kwargs):
    """transformers' sdpa_attention_forward, with a packed step that prefills and holds several requests
    computed request by request. Shapes: query [1, heads, tokens, dim], key/value [1, kv_heads, keys, dim],
    attention_mask [1, 1, tokens, keys]; returns ([1, tokens, heads, dim], None) as transformers does.
    transformers passes `dropout` and `scaling` as keywords (defaults 0.0 and None, as sdpa_attention_forward's)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    dropout, scaling = kwargs.pop("dropout", 0.0), kwargs.pop("scaling", None)

    bounds = _segments(kwargs) if query.shape[0] == 1 and attention_mask is not None and dropout == 0.0 else None
    if bounds is None or len(bounds[0]) <= 2 or int(kwargs.get("max_length_q") or 0) <= 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    q_bounds, k_bounds = bounds
    heads, dim = query.shape[1], query.shape[3]
    kv_heads = key.shape[1]
    out = query.new_empty(1, query.shape[2], heads, dim)
    for q0, q1, k0, k1 in zip(q_bounds, q_bounds[1:], k_bounds, k_bounds[1:]):
        if q1 == q0:
            continue
        k, v = key[:, :, k0:k1], value[:, :, k0:k1]
        if q1 - q0 == 1:  # a decode row attends to all of its own keys: no mask; query heads grouped per KV head
            q = query[:, :, q0:q1].reshape(1, kv_heads, heads // kv_heads, dim)
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scaling)
            out[0, q0] = o.reshape(heads, dim)
        else:
            o = torch.nn.functional.scaled_dot_product_attention(
                query[:, :, q0:q1], k, v, attn_mask=attention_mask[:, :, q0:q1, k0:k1], scale=scaling,
                enable_gqa=kv_heads != heads)
            out[0, q0:q1] = o[0].transpose(0, 1)
    return out, None

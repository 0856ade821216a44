"""Multi-head latent attention (MLA: DeepSeek-V2/V3/R1, Kimi K2): the shapes that make its memory and FLOPs differ from
grouped-query attention.

What the planner takes from TensorRT-LLM's PyTorch backend (the only one that runs these models):
- the KV cache holds one latent vector per token and layer, kv_lora_rank + qk_rope_head_dim elements, shared by every
  head, so a tensor-parallel rank cannot split it: each rank holds the whole of it (under attention data parallelism,
  for its own requests only);
- a decoding token attends in the latent space (the absorbed form): every local head multiplies its query, projected
  into the latent, with each cached latent vector (kv_lora_rank + rope elements) and sums the latents back
  (kv_lora_rank), so decode attention does many FLOPs per byte read and can be compute-bound;
- a prompt runs as ordinary attention whose queries and keys have qk_nope_head_dim + qk_rope_head_dim elements per head
  and whose values have v_head_dim.
Where silicon timed the decode attention of DeepSeek's latent (512 + 64) on the GPU (data/trtllm_mla_decode_latency.tsv,
scripts/mla_record.py), a layer takes that time (measured_decode_s) instead: on Hopper an FP8 cache's math runs far below
the FP8 rate (H200: 0.37 ns per cached token and layer with 128 heads, against 0.25 at the FP8 rate the planner's
fraction gives), on Blackwell at about that rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.data import packaged_fact_rows


class LatentAttention(BaseModel):
    """The MLA shape of a config (transformers' DeepseekV3Config keys)."""

    model_config = ConfigDict(frozen=True)

    kv_lora_rank: int
    q_lora_rank: int | None  # None: queries projected straight from the hidden state (DeepSeek-V2-Lite)
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def cached_elements(self) -> int:
        """Elements the KV cache holds per token and layer: the compressed latent and the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def query_key_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def projections(self, hidden: int, heads: int) -> list[tuple[str, int]]:
        """One layer's attention projections under their Hugging Face names, with their weights: the query path (down-
        and up-projection, or one projection), the joint KV down-projection (latent and RoPE key), the KV up-projection
        (each head's no-RoPE key and value) and the output."""
        query = ([("q_a_proj", hidden * self.q_lora_rank), ("q_b_proj", self.q_lora_rank * heads * self.query_key_dim)]
                 if self.q_lora_rank else [("q_proj", hidden * heads * self.query_key_dim)])
        return query + [("kv_a_proj_with_mqa", hidden * self.cached_elements),
                        ("kv_b_proj", self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)),
                        ("o_proj", heads * self.v_head_dim * hidden)]

    @property
    def norm_params(self) -> int:
        """The RMSNorms on the query and KV latents, per layer."""
        return (self.q_lora_rank or 0) + self.kv_lora_rank

    def context_flops_per_pair(self, heads: float) -> float:
        """FLOPs per (prompt token, key) pair per layer: QK^T over the query-key dim and PV over the value dim."""
        return 2 * heads * (self.query_key_dim + self.v_head_dim)

    def decode_flops_per_key(self, heads: float) -> float:
        """FLOPs per (decoding token, cached token) per layer in the absorbed form: each head's latent query against the
        cached latent and RoPE key, then the weighted sum of the latents."""
        return 2 * heads * (self.cached_elements + self.kv_lora_rank)


@dataclass(frozen=True)
class LatentDecode:
    """One iteration's decode attention over the latent cache, all layers: its math, the rate of the cache's precision
    before the backend's fitted fraction, that precision's bits (8: FP8 cache and query; 16), and silicon's time for it
    where the GPU was timed (which then stands)."""

    flops: float
    rate: float
    bits: int
    measured_s: float | None

    def seconds(self, fraction: float, read_s: float) -> float:
        """Silicon's time, else the longer of the math at `fraction` of the rate and the cache's reads (`read_s`)."""
        return self.measured_s if self.measured_s is not None else max(read_s, self.flops / (self.rate * fraction))


def latent_attention_from(raw: dict[str, Any], source: str) -> LatentAttention | None:
    """The MLA shape of an HF config, None for any other attention; refuses the attention that picks or pools the tokens
    it attends to (DeepSeek-V3.2's sparse attention, V4's compressed one), which the planner would price as dense."""
    for key, kind in (("index_topk", "sparse attention (a lightning indexer picks each query's top-k tokens)"),
                      ("compress_ratios", "compressed attention (the cache pools tokens)")):
        if raw.get(key):
            raise UnsupportedError(
                f"{source} uses {kind}, `{key}` ({raw.get('model_type', 'unknown')}): the planner prices every cached "
                "token as attended and holds no indexer or pooled cache, so it would misstate memory and speed.",
                hint="Plan a model with dense attention (grouped-query or DeepSeek-V3's latent attention); size this one from "
                     "NVIDIA's published figures or your own bench.")
    if not raw.get("kv_lora_rank"):
        return None
    missing = [key for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if not raw.get(key)]
    if missing:
        raise InvalidInputError(f"{source} has multi-head latent attention (kv_lora_rank) but lacks {', '.join(missing)}.",
                                hint="Pass the model's own config.json (DeepSeek-V2/V3 configs give every MLA size).")
    return LatentAttention(
        kv_lora_rank=int(raw["kv_lora_rank"]), q_lora_rank=int(raw["q_lora_rank"]) if raw.get("q_lora_rank") else None,
        qk_nope_head_dim=int(raw["qk_nope_head_dim"]), qk_rope_head_dim=int(raw["qk_rope_head_dim"]),
        v_head_dim=int(raw["v_head_dim"]),
    )


# DeepSeek-V3's latent, the shape silicon's MLA timings were taken at
_TIMED_LATENT = (512, 64)


@lru_cache(maxsize=1)
def _decode_table() -> dict[tuple[str, str], dict[int, tuple[float, float, float]]]:
    """(gpu key, "fp8" or "bfloat16") -> {query heads per rank: (seconds per call, per sequence, per cached token)}, from
    data/trtllm_mla_decode_latency.tsv. Tables AIConfigurator marks "legacy" (A100's and L40S's, TensorRT-LLM 1.0) are left
    out, as for grouped-query attention (rates._decode_attention_table): A100's FP8 and BF16 timings are the same rows."""
    table: dict[tuple[str, str], dict[int, tuple[float, float, float]]] = {}
    for row in packaged_fact_rows("trtllm_mla_decode_latency.tsv"):
        if row["provenance"] != "legacy":
            costs = (float(row["per_call_us"]) * 1e-6, float(row["per_sequence_us"]) * 1e-6, float(row["per_cached_token_ns"]) * 1e-9)
            table.setdefault((row["gpu"], row["kv_dtype"]), {})[int(row["heads"])] = costs
    return table


def measured_decode_s(latent: LatentAttention, gpu_key: str, kv_bytes_per_element: float, heads: float, sequences: float,
                      attended: float) -> float | None:
    """One layer's decode attention as silicon timed it on this GPU for `sequences` decoding sequences attending to
    `attended` cached tokens in all, at the measured head count per rank nearest `heads`; None where the GPU, the cache's
    dtype or the latent's shape was not timed."""
    shapes = _decode_table().get((gpu_key, "fp8" if kv_bytes_per_element <= 1 else "bfloat16"))
    if not shapes or (latent.kv_lora_rank, latent.qk_rope_head_dim) != _TIMED_LATENT or not sequences:
        return None
    per_call, per_sequence, per_token = shapes[min(shapes, key=lambda h: abs(math.log(h / max(heads, 1e-9))))]
    return per_call + per_sequence * sequences + per_token * attended

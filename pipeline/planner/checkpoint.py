"""How a checkpoint says its weights are stored: the precision a quantized checkpoint declares, read as TensorRT-LLM reads
it (no weights opened)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Protocol

from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS
from pipeline.planner.latent import LatentAttention

# What a quantized checkpoint declares, read as TensorRT-LLM's PyTorch backend reads it (tensorrt_llm/_torch/model_config.py
# @1a0dc5f7 ModelConfig.from_pretrained): ModelOpt's hf_quant_config.json first (load_modelopt_quant_config: quant_algo,
# kv_cache_quant_algo; "fp8_pb_wo" is FP8_BLOCK_SCALES), else config.json's quantization_config (load_hf_quant_config:
# quant_method "fp8" with a weight_block_size is FP8_BLOCK_SCALES; "mxfp4" quantizes the MoE experts only, excluding
# attention, router, embedding and lm_head). Newer ModelOpt exports repeat hf_quant_config.json in config.json as
# quant_method "modelopt", and a TensorRT-LLM checkpoint's config.json names the same QuantAlgo values under `quantization`;
# AWQ/GPTQ/FP8 checkpoints of other tools name their bits. Each maps to the planner's precision
# of the same storage (pipeline/core/quant.py).
_QUANT_ALGO_PRECISION = {
    **{fmt.quant_algo: name for name, fmt in QUANT_FORMATS.items() if fmt.quant_algo},
    "FP8_BLOCK_SCALES": "fp8", "FP8_PB_WO": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8",
}
_KV_ALGO_PRECISION = {fmt.kv_cache_quant_algo: name for name, fmt in KV_CACHE_FORMATS.items() if fmt.kv_cache_quant_algo}
MXFP4_BITS_PER_WEIGHT = 4 + 8 / 32  # E2M1 weights, one E8M0 scale per 32 (group_size 32 in load_hf_quant_config)


def checkpoint_precision(raw: dict[str, Any]) -> dict[str, str | None]:
    """The ModelSpec fields that say how a checkpoint is stored, from its config (`quantization_config`, where
    model_spec_from_config has put hf_quant_config.json's `quantization` as quant_method "modelopt")."""
    config = raw.get("quantization_config")
    engine_checkpoint = raw.get("quantization")  # a TensorRT-LLM checkpoint's config.json (`pipeline convert`): QuantAlgo names
    if not isinstance(config, dict) and isinstance(engine_checkpoint, dict) and "quant_algo" in engine_checkpoint:
        config = {**engine_checkpoint, "quant_method": "modelopt"}
    if not isinstance(config, dict) or not config:
        return {}
    method = str(config.get("quant_method") or "").lower()
    sixteen_bit = "fp16" if str(raw.get("torch_dtype") or raw.get("dtype") or "").lower() in ("float16", "fp16") else "bf16"
    if method == "modelopt":
        algo = str(config.get("quant_algo") or "").upper() or None
        kv = str(config.get("kv_cache_quant_algo") or "").upper() or None
        precision = _QUANT_ALGO_PRECISION.get(algo) if algo else sixteen_bit
        kv_precision = _KV_ALGO_PRECISION.get(kv) if kv else None
        if precision is None or (kv and kv_precision is None):
            return {"unread_quantization": f"ModelOpt quant_algo {algo}, kv_cache_quant_algo {kv}"}
        return {"checkpoint_quant": precision, "checkpoint_kv_cache": kv_precision}
    if method == "mxfp4":
        return {"checkpoint_quant": sixteen_bit, "expert_weights": "mxfp4"}
    if method in ("fp8", "fbgemm_fp8"):
        return {"checkpoint_quant": "fp8"}
    bits = config.get("bits") or config.get("w_bit")
    if method in ("awq", "gptq") and bits in (4, 8):
        return {"checkpoint_quant": "int4_awq" if bits == 4 else "int8_wo"}
    return {"unread_quantization": f"quant_method {method or '(none)'}"}


def excluded_module_globs(raw: dict[str, Any]) -> tuple[str, ...]:
    """The module-name globs a quantized checkpoint leaves unquantized: ModelOpt's exclude_modules (hf_quant_config.json,
    or config.json's quantization_config) and the `ignore` / `modules_to_not_convert` lists other exporters write there."""
    config = raw.get("quantization_config")
    if not isinstance(config, dict):
        return ()
    lists = (config.get(key) for key in ("exclude_modules", "ignore", "modules_to_not_convert"))
    return tuple(str(glob) for globs in lists if isinstance(globs, list) for glob in globs)


class LayerShapes(Protocol):
    """What sixteen_bit_linear_params reads of a model (shapes.ModelSpec, which imports this module, has it all)."""

    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    shared_expert_intermediate_size: int
    latent_attention: LatentAttention | None

    @property
    def moe_layer_count(self) -> int: ...


# Where a multimodal checkpoint keeps the language model's layers, besides the plain `model.layers`
_LAYER_PREFIXES = ("model.layers", "language_model.model.layers", "model.language_model.layers")


def sixteen_bit_linear_params(model: LayerShapes, globs: tuple[str, ...]) -> int:
    """The linear weights outside the routed experts that `globs` leave in 16-bit, matched as TensorRT-LLM matches them
    (fnmatchcase of the module name against each glob: QuantConfig.is_module_excluded_from_quantization, NVIDIA/TensorRT-LLM
    @01ea6d79 tensorrt_llm/models/modeling_utils.py) with the Hugging Face names of each layer's projections, and of their
    parents: a checkpoint that excludes `model.layers.*.self_attn` stores its projections unquantized. NVIDIA's
    NVFP4 DeepSeek and Kimi checkpoints leave their attention so (AIConfigurator 0.12.0's models/helpers.py names them).
    The dense layers are taken to be the first ones (DeepSeek's first_k_dense_replace); an exclusion of routed experts
    is not read: they keep the checkpoint's precision."""
    per_layer = attention_projections(model)
    width, shared = model.intermediate_size, model.shared_expert_intermediate_size
    mlp = "feed_forward" if model.model_type.startswith("llama4") else "mlp"
    shared_name = "shared_experts" if model.latent_attention or "deepseek" in model.model_type else "shared_expert"
    dense_layers = model.num_layers - model.moe_layer_count
    kept = 0
    for layer in range(model.num_layers):
        ffn_name, ffn_width = (mlp, width) if layer < dense_layers else (f"{mlp}.{shared_name}", shared)
        ffn = [(f"{ffn_name}.{proj}", model.hidden_size * ffn_width) for proj in ("gate_proj", "up_proj", "down_proj")] if ffn_width else []
        for suffix, params in per_layer + ffn:
            names = [f"{prefix}.{layer}.{suffix}" for prefix in _LAYER_PREFIXES]
            names += [name.rsplit(".", depth)[0] for name in names for depth in range(1, suffix.count(".") + 1)]
            if any(fnmatchcase(name, glob) for name in names for glob in globs):
                kept += params
    return kept


def attention_projections(model: LayerShapes) -> list[tuple[str, int]]:
    """One layer's attention projections under the names a Hugging Face checkpoint gives them: (name under the layer,
    weights), biases left out. What ModelSpec.attention_params_per_layer sums."""
    hidden, heads, latent = model.hidden_size, model.num_heads, model.latent_attention
    if latent:
        return [(f"self_attn.{name}", weights) for name, weights in latent.projections(hidden, heads)]
    query, kv = heads * model.head_dim, model.num_kv_heads * model.head_dim
    return [("self_attn.q_proj", hidden * query), ("self_attn.k_proj", hidden * kv), ("self_attn.v_proj", hidden * kv),
            ("self_attn.o_proj", query * hidden)]

"""How a checkpoint says its weights are stored: the precision a quantized checkpoint declares, read as TensorRT-LLM reads
it (no weights opened)."""

from __future__ import annotations

from typing import Any

from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS

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

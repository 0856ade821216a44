"""Precision formats: what each `--quant` / `--kv-cache` name means for ModelOpt and TensorRT-LLM.

`quant_algo` / `kv_cache_quant_algo` are the `QuantAlgo` names TensorRT-LLM writes into a
checkpoint's config.json (checked against shared/reference/trtllm_quant_algos.tsv by a test).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import InvalidInputError

# Formats whose weights leave ModelOpt unquantized; TensorRT-LLM quantizes them at build time.
WEIGHTS_PACKED_AT_BUILD = {"int4_wo": "W4A16"}


@dataclass(frozen=True)
class QuantFormat:
    name: str
    quant_algo: str | None  # None: no quantization (plain fp16/bf16 weights)
    min_compute_capability: float
    weight_bits: int
    activation_bits: int
    modelopt_config: str | None  # attribute of modelopt.torch.quantization, None: no quantizer
    needs_calibration: bool
    description: str

    @property
    def is_quantized(self) -> bool:
        return self.quant_algo is not None


@dataclass(frozen=True)
class KvCacheFormat:
    name: str
    kv_cache_quant_algo: str | None
    min_compute_capability: float
    bytes_per_element: float
    description: str


QUANT_FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat("fp16", None, 7.0, 16, 16, None, False, "FP16 weights and activations"),
        QuantFormat("bf16", None, 8.0, 16, 16, None, False, "BF16 weights and activations"),
        QuantFormat("fp8", "FP8", 8.9, 8, 8, "FP8_DEFAULT_CFG", True, "FP8 E4M3 per-tensor weights and activations"),
        QuantFormat("int8_sq", "W8A8_SQ_PER_CHANNEL", 8.0, 8, 8, "INT8_SMOOTHQUANT_CFG", True,
                    "INT8 SmoothQuant: per-channel weights, per-tensor activations"),
        QuantFormat("int8_wo", "W8A16", 8.0, 8, 16, "INT8_WEIGHT_ONLY_CFG", False,
                    "INT8 weight-only (per-channel), 16-bit activations"),
        # ModelOpt 0.47 has no per-channel INT4 weight-only config its TensorRT-LLM export accepts:
        # the checkpoint keeps 16-bit weights with quant_algo W4A16 and trtllm-build packs them.
        QuantFormat("int4_wo", "W4A16", 8.0, 4, 16, None, False,
                    "INT4 weight-only (per-channel), 16-bit activations"),
        QuantFormat("int4_awq", "W4A16_AWQ", 8.0, 4, 16, "INT4_AWQ_CFG", True,
                    "INT4 AWQ: per-group INT4 weights, 16-bit activations"),
        QuantFormat("w4a8_awq", "W4A8_AWQ", 8.9, 4, 8, "W4A8_AWQ_BETA_CFG", True,
                    "INT4 AWQ weights with FP8 activations"),
        QuantFormat("nvfp4", "NVFP4", 10.0, 4, 4, "NVFP4_DEFAULT_CFG", True,
                    "NVFP4: FP4 E2M1 with FP8 block scales (Blackwell)"),
    )
}

KV_CACHE_FORMATS: dict[str, KvCacheFormat] = {
    f.name: f
    for f in (
        KvCacheFormat("auto", None, 7.0, 2.0, "KV cache in the model's 16-bit dtype"),
        KvCacheFormat("fp8", "FP8", 8.9, 1.0, "FP8 KV cache"),
        KvCacheFormat("int8", "INT8", 8.0, 1.0, "INT8 KV cache"),
    )
}


def quant_format(name: str) -> QuantFormat:
    try:
        return QUANT_FORMATS[name.lower()]
    except KeyError:
        raise InvalidInputError(
            f"Unknown quantization format {name!r}.",
            hint=f"Use one of: {', '.join(QUANT_FORMATS)}.",
        ) from None


def kv_cache_format(name: str | None) -> KvCacheFormat:
    key = (name or "auto").lower()
    if key in {"none", "fp16", "bf16", "float16", "bfloat16"}:
        key = "auto"
    try:
        return KV_CACHE_FORMATS[key]
    except KeyError:
        raise InvalidInputError(
            f"Unknown KV-cache format {name!r}.",
            hint=f"Use one of: {', '.join(KV_CACHE_FORMATS)} (auto = the model's 16-bit dtype).",
        ) from None

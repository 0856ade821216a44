"""`pipeline plan`: a capacity and latency model for serving a Hugging Face causal LM with TensorRT-LLM.

Everything here is arithmetic on the model's shapes (its config.json, no weights) and the GPU table:

- memory: weight bytes per precision, KV bytes per token (GQA-aware), the KV capacity left at a
  kv_cache_free_gpu_mem_fraction, and how many sequences of ISL+OSL tokens fit at once;
- time: one in-flight-batching iteration is a handful of phases run one after the other. The
  GEMMs read every weight once and do 2 FLOPs per parameter per token, so they take the longer of
  the two (bandwidth-bound at small batch, compute-bound at large batch); decode attention reads
  each sequence's KV cache (bandwidth-bound); context attention is compute-bound (causal, ~ISL^2);
  tensor parallelism adds two all-reduces per layer; every iteration pays a fixed launch cost per
  layer. TTFT, TPOT and throughput all come from this one step-time model.

The efficiency constants (fraction of datasheet bandwidth and compute reached, per-layer step
overhead) are GLOBAL: fitted once against TensorRT-LLM's published Llama-3.1-8B throughput table by
scripts/plan_vs_published.py, never per GPU or per row. The interconnect figures are assumptions
written down below, not fitted (the published rows we fit on are all TP 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import InvalidInputError, UnsupportedError
from pipeline.gpus import GpuSpec, check_precision, get_gpu, gpu_table
from pipeline.quant import KvCacheFormat, QuantFormat, kv_cache_format, quant_format

Goal = Literal["latency", "throughput"]

GIB = 1024**3


@dataclass(frozen=True)
class Efficiency:
    """The model's only fitted numbers: global, the same for every GPU, precision, model and row."""

    bandwidth: float  # fraction of datasheet HBM bandwidth reached by weight and KV reads
    compute_16bit: float  # fraction of the dense BF16/FP16 rate reached (GEMMs, attention, lm_head)
    compute_8bit: float  # fraction of the dense FP8/INT8 (and FP4) rate reached by quantized GEMMs
    step_overhead_per_layer_s: float  # launch/scheduling cost per layer per iteration

    def as_dict(self) -> dict[str, float]:
        return {
            "bandwidth_efficiency": self.bandwidth,
            "compute_efficiency_16bit": self.compute_16bit,
            "compute_efficiency_8bit": self.compute_8bit,
            "step_overhead_per_layer_us": round(self.step_overhead_per_layer_s * 1e6, 3),
        }


# Fitted by scripts/plan_vs_published.py on TensorRT-LLM's published Llama-3.1-8B rows (TP 1).
# Leave-one-GPU-out, the constants move by at most 0.02 (overhead: 0-17 us) and the held-out GPU's
# median error stays under 8% (scripts/plan_vs_published.py --cv).
EFFICIENCY = Efficiency(bandwidth=0.72, compute_16bit=0.71, compute_8bit=0.53, step_overhead_per_layer_s=15.8e-6)

# ---- fixed assumptions (not fitted) ----------------------------------------------------------------
RUNTIME_RESERVE_GIB = 1.5  # CUDA context, cuBLAS/NCCL workspaces, decoder buffers
ACTIVATION_BYTES = 2  # activations stay 16-bit
LOGITS_BYTES = 4  # fp32 logits for the last token of each sequence
DEFAULT_KV_FRACTION = 0.90  # TensorRT-LLM's kv_cache_free_gpu_mem_fraction default
TOKENS_PER_BLOCK = 32  # trtllm-build --tokens_per_block default: KV is reserved in whole blocks
# Per-GPU all-reduce bandwidth (bytes/s, one direction) and latency by interconnect generation.
NVLINK_BANDWIDTH = {"ampere": 300e9, "hopper": 450e9, "blackwell": 900e9}
PCIE_BANDWIDTH = 25e9  # PCIe Gen4 x16, effective
ALLREDUCE_LATENCY_S = {"nvlink": 8e-6, "pcie": 25e-6}
ALLREDUCE_EFFICIENCY = 0.7
MAX_BATCH_CAP = 4096  # beyond this the decoder buffers grow without throughput gain
MAX_NUM_TOKENS_CAP = 32768
GROUP_SIZE_AWQ = 128  # INT4-AWQ: one 16-bit scale per 128 weights
GROUP_SIZE_NVFP4 = 16  # NVFP4: one FP8 scale per 16 weights


# =====================================================================================================
# Model shapes
# =====================================================================================================


class ModelSpec(BaseModel):
    """The shapes that decide memory and FLOPs, read from an HF config.json."""

    model_config = ConfigDict(frozen=True)

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int | None = None
    dtype: str | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    num_experts: int = 1  # MoE: experts per layer (1 = dense)
    experts_per_token: int = 1

    # parameter counts --------------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        q = self.hidden_size * self.num_heads * self.head_dim
        kv = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * self.hidden_size
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.attention_bias else 0
        return q + kv + o + bias

    @property
    def mlp_params_per_expert(self) -> int:
        bias = (2 * self.intermediate_size + self.hidden_size) if self.mlp_bias else 0
        return 3 * self.hidden_size * self.intermediate_size + bias

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts if self.num_experts > 1 else 0

    @property
    def matmul_params_per_layer(self) -> int:
        """Weights of every linear layer in one decoder layer (all experts)."""
        return self.attention_params_per_layer + self.num_experts * self.mlp_params_per_expert + self.router_params_per_layer

    @property
    def active_matmul_params_per_layer(self) -> int:
        """Weights one token multiplies through in one layer (top-k experts for MoE)."""
        return (
            self.attention_params_per_layer
            + self.experts_per_token * self.mlp_params_per_expert
            + self.router_params_per_layer
        )

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate lm_head weights (0 when tied to the embeddings)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        return (
            self.num_layers * self.matmul_params_per_layer
            + self.norm_params
            + self.embedding_params
            + self.lm_head_params
        )

    @property
    def active_params_per_token(self) -> int:
        """Multiply-accumulate weights per token through the layers (the lm_head is counted apart)."""
        return self.num_layers * self.active_matmul_params_per_layer

    @property
    def head_flops_per_token(self) -> int:
        return 2 * self.vocab_size * self.hidden_size


def _config_path(path: str | Path) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_dir():
        candidate = candidate / "config.json"
    if not candidate.is_file():
        raise InvalidInputError(
            f"No Hugging Face config.json at {path}.",
            hint="Pass a model folder that holds config.json (e.g. build/<model>/hf) or the config.json file itself.",
        )
    return candidate


def model_spec_from_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from an HF folder or config.json (GQA-aware; head_dim from config or hidden/heads)."""
    config_file = _config_path(path)
    try:
        raw: dict[str, Any] = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidInputError(f"Cannot read {config_file}: {error}", hint="Pass a valid HF config.json.") from None
    if isinstance(raw.get("text_config"), dict):  # multimodal wrappers keep the LM in text_config
        raw = {**raw, **raw["text_config"]}
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    missing = [key for key in required if not raw.get(key)]
    if missing:
        raise UnsupportedError(
            f"{config_file} lacks {', '.join(missing)}: it is not a decoder-only causal LM config the planner understands.",
            hint="The planner reads Llama-style configs (hidden_size, num_hidden_layers, num_attention_heads, vocab_size).",
        )
    hidden = int(raw["hidden_size"])
    heads = int(raw["num_attention_heads"])
    head_dim = raw.get("head_dim") or hidden // heads
    intermediate = raw.get("intermediate_size") or raw.get("moe_intermediate_size") or 4 * hidden
    experts = int(raw.get("num_local_experts") or raw.get("num_experts") or 1)
    name = config_file.parent.name if config_file.name == "config.json" else config_file.stem
    return ModelSpec(
        name=name,
        model_type=str(raw.get("model_type", "unknown")),
        hidden_size=hidden,
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        intermediate_size=int(intermediate),
        vocab_size=int(raw["vocab_size"]),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        max_position_embeddings=raw.get("max_position_embeddings"),
        dtype=raw.get("torch_dtype") or raw.get("dtype"),
        attention_bias=bool(raw.get("attention_bias", raw.get("model_type") in {"qwen2"})),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        num_experts=experts,
        experts_per_token=int(raw.get("num_experts_per_tok") or 1) if experts > 1 else 1,
    )


# =====================================================================================================
# Bytes
# =====================================================================================================


def _quant(quant: QuantFormat | str) -> QuantFormat:
    return quant if isinstance(quant, QuantFormat) else quant_format(quant)


def _kv(kv: KvCacheFormat | str | None) -> KvCacheFormat:
    return kv if isinstance(kv, KvCacheFormat) else kv_cache_format(kv)


def _gpu(gpu: GpuSpec | str) -> GpuSpec:
    return gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)


def bits_per_weight(quant: QuantFormat | str) -> float:
    """Storage bits per quantized linear-layer weight, group scales included."""
    fmt = _quant(quant)
    if fmt.name == "nvfp4":
        return fmt.weight_bits + 8 / GROUP_SIZE_NVFP4
    if fmt.name in {"int4_awq", "w4a8_awq"}:
        return fmt.weight_bits + 16 / GROUP_SIZE_AWQ
    return float(fmt.weight_bits)  # per-tensor / per-channel scales are negligible


def weight_bytes(model: ModelSpec, quant: QuantFormat | str) -> int:
    """Bytes of the whole model's weights: linear layers at the format's bits (plus group scales),
    embeddings, lm_head and norms in 16-bit (the quantizers leave those unquantized)."""
    fmt = _quant(quant)
    linear = model.num_layers * model.matmul_params_per_layer * bits_per_weight(fmt) / 8
    linear += model.num_layers * model.num_experts * model.hidden_size * 4 if fmt.is_quantized else 0  # per-channel scales
    sixteen_bit = (model.embedding_params + model.lm_head_params + model.norm_params) * 2
    return int(linear + sixteen_bit)


def weight_bytes_per_gpu(model: ModelSpec, quant: QuantFormat | str, tp: int) -> int:
    """Layers and lm_head are split across TP ranks; the embedding table is replicated."""
    fmt = _quant(quant)
    total = weight_bytes(model, fmt)
    replicated = (model.embedding_params + model.norm_params) * 2
    if model.tie_word_embeddings:  # the tied table doubles as the lm_head, which is split
        replicated = model.norm_params * 2 + model.embedding_params * 2
    return int(replicated + (total - replicated) / tp)


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each TP rank holds: split when there are enough, else replicated (at least one)."""
    return max(1, math.ceil(model.num_kv_heads / tp))


def kv_bytes_per_token(model: ModelSpec, kv: KvCacheFormat | str | None = None, tp: int = 1) -> float:
    """2 (K and V) x layers x kv_heads x head_dim x bytes per element; per GPU when tp > 1."""
    fmt = _kv(kv)
    heads = model.num_kv_heads if tp == 1 else kv_heads_per_gpu(model, tp)
    return 2 * model.num_layers * heads * model.head_dim * fmt.bytes_per_element


def activation_bytes(model: ModelSpec, tp: int, max_num_tokens: int, max_batch_size: int) -> int:
    """The engine's activation buffers at its build limits (hidden states, QKV, MLP intermediate, logits)."""
    per_token = (
        4 * model.hidden_size
        + (model.num_heads + 2 * model.num_kv_heads) * model.head_dim / tp
        + 2 * model.intermediate_size * model.experts_per_token / tp
    ) * ACTIVATION_BYTES
    return int(max_num_tokens * per_token + max_batch_size * model.vocab_size * LOGITS_BYTES)


# =====================================================================================================
# GPU rates
# =====================================================================================================


def compute_rate(gpu: GpuSpec, quant: QuantFormat) -> float:
    """Dense tensor-core FLOP/s at which this precision's GEMMs run on this GPU."""
    bf16 = (gpu.dense_bf16_tflops or 0) * 1e12
    if quant.name == "nvfp4":
        rate = 2 * (gpu.dense_fp8_tflops or 0) * 1e12  # FP4 tensor cores: twice the FP8 rate
    elif quant.activation_bits == 8 and quant.quant_algo and "SQ" in quant.quant_algo:
        rate = (gpu.dense_int8_tops or 0) * 1e12
    elif quant.activation_bits == 8:
        rate = (gpu.dense_fp8_tflops or 0) * 1e12
    else:  # 16-bit activations (fp16/bf16 and weight-only formats: weights are dequantized on the fly)
        rate = bf16
    return rate or bf16


def attention_rate(gpu: GpuSpec) -> float:
    """Attention math (softmax(QK^T)V) runs in 16-bit."""
    return (gpu.dense_bf16_tflops or 0) * 1e12


def hbm_bandwidth(gpu: GpuSpec) -> float:
    return (gpu.hbm_bandwidth_tbps or 0) * 1e12


def link_bandwidth(gpu: GpuSpec) -> tuple[float, float]:
    """(bytes/s, latency s) of one all-reduce hop: NVLink by generation, else PCIe."""
    if gpu.nvlink:
        return NVLINK_BANDWIDTH.get(gpu.architecture, 300e9), ALLREDUCE_LATENCY_S["nvlink"]
    return PCIE_BANDWIDTH, ALLREDUCE_LATENCY_S["pcie"]


def _require_figures(gpu: GpuSpec) -> None:
    if gpu.is_cpu or not gpu.memory_gib or not gpu.hbm_bandwidth_tbps or not gpu.dense_bf16_tflops:
        usable = [k for k, g in gpu_table().items() if g.memory_gib and g.hbm_bandwidth_tbps and g.dense_bf16_tflops]
        raise UnsupportedError(
            f"The planner has no memory/bandwidth/FLOP figures for {gpu.key!r}.",
            hint=f"Plan for one of: {', '.join(usable)}.",
        )


def check_tp(model: ModelSpec, tp: int) -> None:
    """Refuse a TP size that does not split the attention heads (and KV heads) evenly."""
    if tp < 1 or model.num_heads % tp:
        options = [n for n in (1, 2, 4, 8, 16) if model.num_heads % n == 0]
        raise InvalidInputError(
            f"--tp {tp} does not divide the model's {model.num_heads} attention heads.",
            hint=f"Use --tp {' or '.join(map(str, options))}.",
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise InvalidInputError(
            f"--tp {tp} neither divides nor is a multiple of the model's {model.num_kv_heads} KV heads.",
            hint="Pick a TP size that divides the KV heads, or a multiple of them (KV heads are then replicated).",
        )


# =====================================================================================================
# Memory plan
# =====================================================================================================


class MemoryPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu_memory_gib: float
    weights_gib: float  # per GPU
    reserve_gib: float  # runtime + activations per GPU
    free_gib: float  # per GPU, after weights and reserve
    kv_cache_free_gpu_mem_fraction: float
    kv_cache_gib: float  # per GPU
    kv_bytes_per_token: float  # per GPU
    kv_capacity_tokens: int
    max_sequences: int  # concurrent sequences of ISL+OSL tokens
    fits: bool


def memory_plan(
    model: ModelSpec,
    gpu: GpuSpec,
    quant: QuantFormat,
    kv: KvCacheFormat,
    tp: int,
    isl: int,
    osl: int,
    *,
    max_num_tokens: int = 8192,
    max_batch_size: int = 256,
    kv_fraction: float = DEFAULT_KV_FRACTION,
) -> MemoryPlan:
    total = (gpu.memory_gib or 0) * GIB
    weights = weight_bytes_per_gpu(model, quant, tp)
    reserve = RUNTIME_RESERVE_GIB * GIB + activation_bytes(model, tp, max_num_tokens, max_batch_size)
    free = max(0.0, total - weights - reserve)
    kv_cache = free * kv_fraction
    per_token = kv_bytes_per_token(model, kv, tp)
    capacity = int(kv_cache // per_token)
    blocks_per_sequence = math.ceil((isl + osl) / TOKENS_PER_BLOCK)
    max_sequences = int((capacity // TOKENS_PER_BLOCK) // blocks_per_sequence)
    return MemoryPlan(
        gpu_memory_gib=round(total / GIB, 2),
        weights_gib=round(weights / GIB, 3),
        reserve_gib=round(reserve / GIB, 3),
        free_gib=round(free / GIB, 3),
        kv_cache_free_gpu_mem_fraction=kv_fraction,
        kv_cache_gib=round(kv_cache / GIB, 3),
        kv_bytes_per_token=per_token,
        kv_capacity_tokens=capacity,
        max_sequences=max_sequences,
        fits=max_sequences >= 1,
    )


# =====================================================================================================
# Build settings
# =====================================================================================================


def _round_up(value: float, step: int) -> int:
    return int(step * math.ceil(value / step))


def _batch_from_capacity(sequences: float) -> int:
    """A max_batch_size a little above what the KV cache holds (the runtime caps it there anyway)."""
    sequences = max(1.0, min(sequences, MAX_BATCH_CAP))
    if sequences < 256:
        return max(8, _round_up(sequences, 32) if sequences > 32 else _round_up(sequences, 8))
    return _round_up(sequences, 128 if sequences < 1024 else 256)


def _tokens_for(batch: int, isl: int, osl: int) -> int:
    """max_num_tokens: enough for the batch's decode tokens plus its average share of prefill."""
    raw = min(batch * (1 + isl / osl), MAX_NUM_TOKENS_CAP)
    step = 256 if raw < 4096 else 512 if raw < 8192 else 1024
    return max(2048, _round_up(raw, step))


def recommend_build(
    model: ModelSpec | str | Path,
    gpu: GpuSpec | str,
    quant: QuantFormat | str,
    kv: KvCacheFormat | str | None,
    tp: int,
    goal: Goal,
    isl: int,
    osl: int,
) -> dict[str, Any]:
    """trtllm-build limits for this model on this GPU: max_batch_size, max_num_tokens, max_input_len,
    max_seq_len, kv_cache_free_gpu_mem_fraction. Throughput: as many sequences as the KV cache holds
    at ISL+OSL (and tokens for their prefill share); latency: a small batch, prompts in one chunk.
    Raises UnsupportedError (naming what would fit) when not even one ISL+OSL sequence fits."""
    model = _model(model)
    gpu, quant, kv = _resolve(model, gpu, quant, kv, tp, isl, osl)
    build = _recommend(model, gpu, quant, kv, tp, goal, isl, osl)
    memory = memory_plan(
        model, gpu, quant, kv, tp, isl, osl, max_num_tokens=build["max_num_tokens"],
        max_batch_size=build["max_batch_size"], kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    if not memory.fits:
        _refuse_no_fit(model, gpu, quant, kv, tp, isl, osl)
    return build


def _recommend(model: ModelSpec, gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat, tp: int, goal: Goal, isl: int, osl: int) -> dict[str, Any]:
    kv_fraction = 0.95 if goal == "throughput" else DEFAULT_KV_FRACTION
    # capacity before activations: the activations this recommendation causes are small next to it
    capacity = memory_plan(model, gpu, quant, kv, tp, isl, osl, max_num_tokens=0, max_batch_size=0, kv_fraction=kv_fraction)
    sequences = capacity.max_sequences
    if goal == "throughput":
        max_batch_size = _batch_from_capacity(sequences)
        max_num_tokens = _tokens_for(max_batch_size, isl, osl)
    else:
        max_batch_size = max(1, min(sequences, 64))
        max_num_tokens = max(2048, min(_round_up(isl + max_batch_size, 256), MAX_NUM_TOKENS_CAP))
    max_seq_len = isl + osl
    return {
        "max_batch_size": int(max_batch_size),
        "max_num_tokens": int(max_num_tokens),
        "max_input_len": int(min(isl, max_seq_len)),
        "max_seq_len": int(max_seq_len),
        "kv_cache_free_gpu_mem_fraction": kv_fraction,
    }


# =====================================================================================================
# Time model
# =====================================================================================================


@dataclass(frozen=True)
class StepTime:
    """One in-flight-batching iteration: `decode` sequences each emit a token while `prefill_tokens`
    prompt tokens are processed; seconds per phase."""

    decode: float
    prefill_tokens: float
    gemm_s: float
    decode_attention_s: float
    context_attention_s: float
    allreduce_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.decode_attention_s + self.context_attention_s + self.allreduce_s + self.overhead_s


def step_time(
    model: ModelSpec,
    gpu: GpuSpec,
    quant: QuantFormat,
    kv: KvCacheFormat,
    tp: int,
    *,
    decode: float,
    decode_context: float,
    prefill_tokens: float,
    prefill_context: float,
    logits_tokens: float | None = None,
    eff: Efficiency = EFFICIENCY,
) -> StepTime:
    """Seconds for one iteration.

    decode: sequences in generation; decode_context: their mean KV length;
    prefill_tokens: prompt tokens in this iteration; prefill_context: the mean causal span they attend
    over (ISL/2 for a whole prompt); logits_tokens: tokens that need the lm_head (default: decode).
    """
    tokens = decode + prefill_tokens
    logits = decode if logits_tokens is None else logits_tokens
    bandwidth = hbm_bandwidth(gpu) * eff.bandwidth
    rate = compute_rate(gpu, quant) * (eff.compute_16bit if quant.activation_bits >= 16 else eff.compute_8bit)
    attn_rate = attention_rate(gpu) * eff.compute_16bit  # attention and the (unquantized) lm_head run in 16-bit
    # GEMMs: weights read once per step; 2 FLOPs per active weight per token.
    gemm_compute_s = 2 * model.active_params_per_token * tokens / tp / rate + model.head_flops_per_token * logits / tp / attn_rate
    gemm_s = max(weight_bytes_per_gpu(model, quant, tp) / bandwidth, gemm_compute_s) if tokens else 0.0
    # Decode attention: every sequence reads its whole KV cache.
    kv_read = decode * decode_context * kv_bytes_per_token(model, kv, tp)
    decode_attention_s = kv_read / bandwidth
    # Context attention: QK^T and PV, 2 FLOPs each per (query, key, head, dim), causal span.
    heads = model.num_heads / tp
    context_flops = 4 * model.num_layers * heads * model.head_dim * prefill_tokens * prefill_context
    context_attention_s = context_flops / attn_rate if attn_rate else 0.0
    # TP: two all-reduces of the hidden states per layer (ring: 2(tp-1)/tp of the bytes per GPU).
    allreduce_s = 0.0
    if tp > 1 and tokens:
        link, latency = link_bandwidth(gpu)
        message = tokens * model.hidden_size * ACTIVATION_BYTES
        per_call = latency + 2 * (tp - 1) / tp * message / (link * ALLREDUCE_EFFICIENCY)
        allreduce_s = 2 * model.num_layers * per_call
    overhead_s = eff.step_overhead_per_layer_s * model.num_layers
    return StepTime(decode, prefill_tokens, gemm_s, decode_attention_s, context_attention_s, allreduce_s, overhead_s)


def _steady_step(model, gpu, quant, kv, tp, isl: int, osl: int, batch: float, eff: Efficiency) -> StepTime:
    """An iteration in steady state: `batch` sequences decoding, and the prefill of the requests that
    replace the ones finishing (batch/osl requests per step, isl tokens each)."""
    return step_time(
        model, gpu, quant, kv, tp,
        decode=batch,
        decode_context=isl + osl / 2,
        prefill_tokens=batch * isl / osl,
        prefill_context=isl / 2,
        logits_tokens=batch,
        eff=eff,
    )


def prefill_time(model, gpu, quant, kv, tp, isl: int, max_num_tokens: int, eff: Efficiency = EFFICIENCY) -> float:
    """Seconds to prefill one prompt alone, in chunks of max_num_tokens."""
    chunk = max(1, min(isl, max_num_tokens))
    total, done = 0.0, 0
    while done < isl:
        size = min(chunk, isl - done)
        step = step_time(
            model, gpu, quant, kv, tp,
            decode=0, decode_context=0, prefill_tokens=size, prefill_context=done + size / 2, logits_tokens=1, eff=eff,
        )
        total += step.total_s
        done += size
    return total


class Prediction(BaseModel):
    model_config = ConfigDict(frozen=True)

    concurrency: int
    batch: int  # sequences actually in flight (concurrency capped by KV capacity and build limits)
    ttft_ms: float
    tpot_ms: float
    output_tokens_per_s: float
    output_tokens_per_s_per_user: float
    request_latency_s: float


def _sustainable_batch(memory: MemoryPlan, build: dict[str, Any], isl: int, osl: int) -> int:
    """Sequences the runtime keeps in flight: KV capacity (no-evict scheduling reserves ISL+OSL),
    max_batch_size, and the max_num_tokens budget for decode tokens plus their prefill share."""
    token_budget = build["max_num_tokens"] / (1 + isl / osl)
    return max(1, int(min(memory.max_sequences, build["max_batch_size"], max(1, token_budget))))


def _model(model: ModelSpec | str | Path) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else model_spec_from_config(model)


def _resolve(model: ModelSpec, gpu, quant, kv, tp: int, isl: int, osl: int) -> tuple[GpuSpec, QuantFormat, KvCacheFormat]:
    """Formats and GPU from names, with every refusal that needs no arithmetic."""
    gpu, quant, kv = _gpu(gpu), _quant(quant), _kv(kv)
    _require_figures(gpu)
    check_precision(gpu, quant, kv)
    check_tp(model, tp)
    if isl < 1 or osl < 1:
        raise InvalidInputError("ISL and OSL must be at least 1 token.", hint="e.g. --isl 1024 --osl 128")
    if model.max_position_embeddings and isl + osl > model.max_position_embeddings:
        raise InvalidInputError(
            f"ISL+OSL = {isl + osl} exceeds {model.name}'s context window ({model.max_position_embeddings} tokens).",
            hint=f"Keep --isl + --osl <= {model.max_position_embeddings}.",
        )
    return gpu, quant, kv


def _refuse_no_fit(model, gpu, quant, kv, tp, isl, osl) -> None:
    raise UnsupportedError(
        f"{model.name} at {quant.name} on {tp}x {gpu.key} leaves no room for one {isl + osl}-token sequence.",
        hint=_what_fits_hint(model, gpu, quant, kv, tp, isl, osl),
    )


def predict(
    model: ModelSpec | str | Path,
    gpu: GpuSpec | str,
    quant: QuantFormat | str,
    kv: KvCacheFormat | str | None,
    tp: int,
    isl: int,
    osl: int,
    concurrency: int,
    *,
    build: dict[str, Any] | None = None,
    efficiency: Efficiency | None = None,
) -> Prediction:
    """TTFT, TPOT and output tokens/s for a closed loop of `concurrency` clients (each sends its next
    request when the last one finishes), on an engine built with `build` (default: recommend_build
    for throughput)."""
    model = _model(model)
    gpu, quant, kv = _resolve(model, gpu, quant, kv, tp, isl, osl)
    eff = efficiency or EFFICIENCY
    if concurrency < 1:
        raise InvalidInputError("Concurrency must be at least 1.", hint="e.g. --concurrency 8")
    build = build or _recommend(model, gpu, quant, kv, tp, "throughput", isl, osl)
    memory = memory_plan(
        model, gpu, quant, kv, tp, isl, osl,
        max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
        kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    if not memory.fits:
        _refuse_no_fit(model, gpu, quant, kv, tp, isl, osl)
    batch = min(concurrency, _sustainable_batch(memory, build, isl, osl))
    ttft = prefill_time(model, gpu, quant, kv, tp, isl, build["max_num_tokens"], eff)
    # Other clients' prompts are prefilled inside our decode steps: (batch - 1)/osl of them per step.
    step = step_time(
        model, gpu, quant, kv, tp,
        decode=batch, decode_context=isl + osl / 2,
        prefill_tokens=(batch - 1) * isl / osl, prefill_context=isl / 2, logits_tokens=batch, eff=eff,
    ).total_s
    if batch > 1:
        ttft += step / 2  # a new request waits on average half an iteration to join the batch
    latency = ttft + (osl - 1) * step
    throughput = batch * osl / latency
    if concurrency > batch:  # the rest queue (Little's law): each waits for concurrency - batch requests to finish
        ttft += (concurrency - batch) / (throughput / osl)
        latency = ttft + (osl - 1) * step
    return Prediction(
        concurrency=concurrency,
        batch=int(batch),
        ttft_ms=round(ttft * 1e3, 3),
        tpot_ms=round(step * 1e3, 3),
        output_tokens_per_s=round(throughput, 2),
        output_tokens_per_s_per_user=round(osl / latency, 3),
        request_latency_s=round(latency, 4),
    )


class ThroughputEstimate(BaseModel):
    model_config = ConfigDict(frozen=True)

    batch: int
    step_ms: float
    output_tokens_per_s: float
    bound: str  # what dominates an iteration
    phases_ms: dict[str, float]


def max_throughput(
    model: ModelSpec | str | Path,
    gpu: GpuSpec | str,
    quant: QuantFormat | str,
    kv: KvCacheFormat | str | None,
    tp: int,
    isl: int,
    osl: int,
    *,
    build: dict[str, Any] | None = None,
    efficiency: Efficiency | None = None,
) -> ThroughputEstimate:
    """Output tokens/s of an offline max-load run (trtllm-bench throughput): the batch the KV cache
    and build limits allow, each iteration carrying its share of prefill."""
    model = _model(model)
    gpu, quant, kv = _resolve(model, gpu, quant, kv, tp, isl, osl)
    eff = efficiency or EFFICIENCY
    build = build or _recommend(model, gpu, quant, kv, tp, "throughput", isl, osl)
    memory = memory_plan(
        model, gpu, quant, kv, tp, isl, osl,
        max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
        kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    if not memory.fits:
        _refuse_no_fit(model, gpu, quant, kv, tp, isl, osl)
    batch = _sustainable_batch(memory, build, isl, osl)
    step = _steady_step(model, gpu, quant, kv, tp, isl, osl, batch, eff)
    phases = {
        "gemm": step.gemm_s, "decode_attention": step.decode_attention_s,
        "context_attention": step.context_attention_s, "allreduce": step.allreduce_s, "overhead": step.overhead_s,
    }
    gemm_bound = "weight reads" if weight_bytes_per_gpu(model, quant, tp) / (hbm_bandwidth(gpu) * eff.bandwidth) >= step.gemm_s else "GEMM compute"
    dominant = max(phases, key=phases.get)
    bound = gemm_bound if dominant == "gemm" else {
        "decode_attention": "KV reads", "context_attention": "context attention",
        "allreduce": "TP all-reduce", "overhead": "step overhead",
    }[dominant]
    return ThroughputEstimate(
        batch=batch,
        step_ms=round(step.total_s * 1e3, 3),
        output_tokens_per_s=round(batch / step.total_s, 2),
        bound=bound,
        phases_ms={k: round(v * 1e3, 3) for k, v in phases.items()},
    )


# =====================================================================================================
# The plan
# =====================================================================================================


class PlanSpec(BaseModel):
    """Everything `pipeline plan` needs, validated once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Path = Field(description="HF model folder or its config.json")
    gpu: str
    quant: str = "fp16"
    kv_cache: str | None = None
    tp: int = Field(1, ge=1)
    isl: int = Field(1024, ge=1)
    osl: int = Field(128, ge=1)
    concurrency: int = Field(1, ge=1)
    goal: Goal = "throughput"
    kv_cache_free_gpu_mem_fraction: float | None = Field(None, gt=0, le=1)


class Alternative(BaseModel):
    model_config = ConfigDict(frozen=True)

    tp: int
    quant: str
    kv_cache: str
    max_sequences: int


class PlanResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: dict[str, Any]
    gpu: str
    quant: str
    kv_cache: str
    tp: int
    isl: int
    osl: int
    goal: Goal
    memory: MemoryPlan
    fits: bool
    alternatives: list[Alternative]
    build: dict[str, Any]
    prediction: Prediction | None
    max_throughput: ThroughputEstimate | None
    constants: dict[str, float]


def alternatives(model: ModelSpec, gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat, tp: int, isl: int, osl: int) -> list[Alternative]:
    """Configurations that hold at least one ISL+OSL sequence: larger TP at this precision, then
    smaller precisions (with an FP8 KV cache where the GPU runs one) at this TP."""
    found: list[Alternative] = []
    for size in (1, 2, 4, 8, 16):
        if size <= tp or model.num_heads % size or (model.num_kv_heads % size and size % model.num_kv_heads):
            continue
        mem = memory_plan(model, gpu, quant, kv, size, isl, osl, max_num_tokens=2048, max_batch_size=8)
        if mem.fits:
            found.append(Alternative(tp=size, quant=quant.name, kv_cache=kv.name, max_sequences=mem.max_sequences))
            break
    current_bits = bits_per_weight(quant)
    for name in ("fp8", "int8_wo", "int4_awq", "nvfp4"):
        other = quant_format(name)
        if not gpu.can_run(other) or bits_per_weight(other) >= current_bits:
            continue
        other_kv = kv_cache_format("fp8") if gpu.can_run_kv(kv_cache_format("fp8")) else kv
        mem = memory_plan(model, gpu, other, other_kv, tp, isl, osl, max_num_tokens=2048, max_batch_size=8)
        if mem.fits:
            found.append(Alternative(tp=tp, quant=other.name, kv_cache=other_kv.name, max_sequences=mem.max_sequences))
    return found


def _what_fits_hint(model, gpu, quant, kv, tp, isl, osl) -> str:
    options = alternatives(model, gpu, quant, kv, tp, isl, osl)
    if not options:
        return f"Shorten ISL+OSL ({isl + osl}) or choose a GPU with more memory than {gpu.key}."
    return "What fits: " + "; ".join(f"--tp {a.tp} --quant {a.quant} --kv-cache {a.kv_cache} ({a.max_sequences} sequences)" for a in options)


def plan(spec: PlanSpec) -> PlanResult:
    """Memory, build limits and predicted latency/throughput for one model/GPU/precision/TP."""
    model = model_spec_from_config(spec.model)
    gpu, quant, kv = _resolve(model, spec.gpu, spec.quant, spec.kv_cache, spec.tp, spec.isl, spec.osl)
    build = _recommend(model, gpu, quant, kv, spec.tp, spec.goal, spec.isl, spec.osl)
    if spec.kv_cache_free_gpu_mem_fraction is not None:
        build = {**build, "kv_cache_free_gpu_mem_fraction": spec.kv_cache_free_gpu_mem_fraction}
    memory = memory_plan(
        model, gpu, quant, kv, spec.tp, spec.isl, spec.osl,
        max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
        kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    options = [] if memory.fits else alternatives(model, gpu, quant, kv, spec.tp, spec.isl, spec.osl)
    prediction = throughput = None
    if memory.fits:
        prediction = predict(model, gpu, quant, kv, spec.tp, spec.isl, spec.osl, spec.concurrency, build=build)
        throughput = max_throughput(model, gpu, quant, kv, spec.tp, spec.isl, spec.osl, build=build)
    return PlanResult(
        model={
            "name": model.name, "params_b": round(model.param_count / 1e9, 3), "layers": model.num_layers,
            "hidden": model.hidden_size, "heads": model.num_heads, "kv_heads": model.num_kv_heads,
            "head_dim": model.head_dim, "vocab": model.vocab_size, "tied_embeddings": model.tie_word_embeddings,
            "weights_gib_total": round(weight_bytes(model, quant) / GIB, 3),
        },
        gpu=gpu.key, quant=quant.name, kv_cache=kv.name, tp=spec.tp, isl=spec.isl, osl=spec.osl, goal=spec.goal,
        memory=memory, fits=memory.fits, alternatives=options, build=build,
        prediction=prediction, max_throughput=throughput, constants=EFFICIENCY.as_dict(),
    )


# =====================================================================================================
# Checking the model against published measurements
# =====================================================================================================

_PUBLISHED_PRECISIONS = {"FP8": ("fp8", "fp8"), "FP16": ("fp16", "auto"), "BF16": ("bf16", "auto")}
PUBLISHED_KV_FRACTION = 0.95  # the perf-overview runs use --kv_cache_free_gpu_mem_fraction 0.95


def trtllm_bench_throughput(
    model: ModelSpec, gpu: str, precision: str, tp: int, isl: int, osl: int, *, efficiency: Efficiency | None = None
) -> ThroughputEstimate:
    """What `trtllm-bench throughput` should report for an engine built for this ISL/OSL. FP8 means
    FP8 weights and an FP8 KV cache (trtllm-bench build sets both); FP16/BF16 a 16-bit KV cache."""
    try:
        quant, kv = _PUBLISHED_PRECISIONS[precision.upper()]
    except KeyError:
        raise InvalidInputError(
            f"Unknown published precision {precision!r}.", hint=f"Use one of: {', '.join(_PUBLISHED_PRECISIONS)}."
        ) from None
    build = {**recommend_build(model, gpu, quant, kv, tp, "throughput", isl, osl), "kv_cache_free_gpu_mem_fraction": PUBLISHED_KV_FRACTION}
    return max_throughput(model, gpu, quant, kv, tp, isl, osl, build=build, efficiency=efficiency)


def compare_published(
    model: ModelSpec, rows: list[dict[str, str]], *, efficiency: Efficiency | None = None
) -> list[dict[str, Any]]:
    """Predicted vs published output tokens/s for rows of trtllm_published_throughput.tsv."""
    out = []
    for row in rows:
        estimate = trtllm_bench_throughput(
            model, row["gpu"], row["precision"], int(row["tp"]), int(row["isl"]), int(row["osl"]), efficiency=efficiency
        )
        published = float(row["tokens_per_s"])
        out.append({
            "gpu": row["gpu"], "tp": int(row["tp"]), "precision": row["precision"],
            "isl": int(row["isl"]), "osl": int(row["osl"]),
            "published_tokens_per_s": published, "predicted_tokens_per_s": estimate.output_tokens_per_s,
            "error_pct": round(100 * (estimate.output_tokens_per_s - published) / published, 2),
            "batch": estimate.batch, "bound": estimate.bound,
        })
    return out


def median_abs_pct_error(comparison: list[dict[str, Any]]) -> float:
    errors = sorted(abs(row["error_pct"]) for row in comparison)
    if not errors:
        return float("nan")
    middle = len(errors) // 2
    return errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2

"""Bytes and memory: weight bytes per precision, GQA-aware KV bytes per token, activation buffers, the
KV capacity left at a kv_cache_free_gpu_mem_fraction, how many ISL+OSL sequences fit, and what would
fit instead when none does."""

from __future__ import annotations

import math
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import UnsupportedError
from pipeline.planner.checkpoint import MXFP4_BITS_PER_WEIGHT
from pipeline.planner.scenario import Scenario, as_kv, as_quant
from pipeline.planner.shapes import ModelSpec
from pipeline.core.quant import KvCacheFormat, QuantFormat, kv_cache_format, quant_format

GIB = 1024**3
RUNTIME_RESERVE_GIB = 1.5  # CUDA context, cuBLAS/NCCL workspaces, decoder buffers
ACTIVATION_BYTES = 2  # activations stay 16-bit
LOGITS_BYTES = 4  # fp32 logits for the last token of each sequence
DEFAULT_KV_FRACTION = 0.90  # TensorRT-LLM's kv_cache_free_gpu_mem_fraction default
TOKENS_PER_BLOCK = 32  # trtllm-build --tokens_per_block default: KV is reserved in whole blocks
GROUP_SIZE_AWQ = 128  # INT4-AWQ: one 16-bit scale per 128 weights
GROUP_SIZE_NVFP4 = 16  # NVFP4: one FP8 scale per 16 weights


def bits_per_weight(quant: QuantFormat | str) -> float:
    """Storage bits per quantized linear-layer weight, group scales included."""
    fmt = as_quant(quant)
    if fmt.name == "nvfp4":
        return fmt.weight_bits + 8 / GROUP_SIZE_NVFP4
    if fmt.name in {"int4_awq", "w4a8_awq"}:
        return fmt.weight_bits + 16 / GROUP_SIZE_AWQ
    return float(fmt.weight_bits)  # per-tensor / per-channel scales are negligible


def expert_bits_per_weight(model: ModelSpec, quant: QuantFormat | str) -> float:
    """Storage bits per routed-expert weight: the checkpoint's own where it stores its experts apart (GPT-OSS's MXFP4),
    else the precision's."""
    return MXFP4_BITS_PER_WEIGHT if model.expert_weights == "mxfp4" else bits_per_weight(quant)


def sixteen_bit_params(model: ModelSpec, quant: QuantFormat | str) -> int:
    """Linear weights that stay 16-bit at this precision: those a quantized checkpoint excludes from its quantization."""
    return model.sixteen_bit_params if as_quant(quant).is_quantized else 0


def weight_bytes(model: ModelSpec, quant: QuantFormat | str) -> int:
    """Bytes of the whole model's weights: linear layers at the format's bits (plus group scales; routed experts at
    expert_bits_per_weight; those the checkpoint excludes from its quantization in 16-bit), embeddings, lm_head and norms
    in 16-bit (the quantizers leave those unquantized)."""
    fmt = as_quant(quant)
    experts, kept = model.routed_expert_params, sixteen_bit_params(model, fmt)
    linear = ((model.linear_params - experts - kept) * bits_per_weight(fmt) + kept * 16
              + experts * expert_bits_per_weight(model, fmt)) / 8
    linear += model.num_layers * model.num_experts * model.hidden_size * 4 if fmt.is_quantized else 0  # per-channel scales
    sixteen_bit = (model.embedding_params + model.lm_head_params + model.norm_params) * 2
    return int(linear + sixteen_bit)


@lru_cache(maxsize=4096)  # pure, and called for every iteration the time model prices
def weight_bytes_per_gpu(model: ModelSpec, quant: QuantFormat | str, tp: int, attention_dp: bool = False) -> int:
    """Layers and lm_head are split across TP ranks; the embedding table is replicated. With attention data parallelism
    only the routed experts are spread over the tp GPUs; every other weight is whole on each."""
    fmt = as_quant(quant)
    total = weight_bytes(model, fmt)
    if attention_dp:
        return int(total - routed_expert_bytes(model, fmt) * (1 - 1 / tp))
    replicated = (model.embedding_params + model.norm_params) * 2
    if model.tie_word_embeddings:  # the tied table doubles as the lm_head, which is split
        replicated = model.norm_params * 2 + model.embedding_params * 2
    return int(replicated + (total - replicated) / tp)


def routed_expert_bytes(model: ModelSpec, quant: QuantFormat | str) -> float:
    """Bytes of the whole model's routed experts."""
    return model.routed_expert_params * expert_bits_per_weight(model, as_quant(quant)) / 8


def weight_bytes_read_per_step(model: ModelSpec, quant: QuantFormat | str, tp: int, tokens: float, *,
                               routed_experts: bool = True, attention_dp: bool = False) -> float:
    """Bytes of weights one iteration of `tokens` tokens reads per GPU. A dense model reads them all. An MoE reads its
    routed experts only as far as the tokens reach them: each token picks k of E experts, so with routing spread evenly a
    layer's expected share of experts touched is 1 - (1 - k/E)^tokens (k/E for one decoding sequence, all of them at
    large batches). routed_experts False: without the routed experts (timed apart, as measured on silicon). With
    attention data parallelism `tokens` are all GPUs' tokens, which the experts see together."""
    total = weight_bytes_per_gpu(model, quant, tp, attention_dp)
    if not model.moe_layer_count:
        return float(total)
    routed = routed_expert_bytes(model, quant) / tp
    touched = 1 - (1 - model.experts_per_token / model.num_experts) ** max(tokens, 1.0) if routed_experts else 0.0
    return total - routed * (1 - touched)


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each TP rank holds: split when there are enough, else replicated (at least one). Latent attention caches
    one latent per token that every rank holds whole."""
    if model.latent_attention:
        return 1
    return max(1, math.ceil(model.num_kv_heads / tp))


@lru_cache(maxsize=4096)
def kv_bytes_per_token(model: ModelSpec, kv: KvCacheFormat | str | None = None, tp: int = 1) -> float:
    """2 (K and V) x layers x kv_heads x head_dim x bytes per element; per GPU when tp > 1. Latent attention: layers x
    (kv_lora_rank + qk_rope_head_dim) x bytes, on every rank whatever the TP (planner/latent.py)."""
    fmt = as_kv(kv)
    if model.latent_attention:
        return model.num_layers * model.latent_attention.cached_elements * fmt.bytes_per_element
    heads = model.num_kv_heads if tp == 1 else kv_heads_per_gpu(model, tp)
    return 2 * model.num_layers * heads * model.head_dim * fmt.bytes_per_element


def activation_bytes(model: ModelSpec, tp: int, max_num_tokens: int, max_batch_size: int) -> int:
    """The engine's activation buffers at its build limits (hidden states, QKV, MLP intermediate, logits)."""
    per_token = (
        4 * model.hidden_size
        + (model.num_heads + 2 * model.num_kv_heads) * model.head_dim / tp
        + 2 * model.active_intermediate_size / tp
    ) * ACTIVATION_BYTES
    return int(max_num_tokens * per_token + max_batch_size * model.vocab_size * LOGITS_BYTES)

class Alternative(BaseModel):
    model_config = ConfigDict(frozen=True)

    tp: int
    quant: str
    kv_cache: str
    max_sequences: int
    pp: int = 1

    def flags(self) -> str:
        """The options that ask for it (`pipeline plan`, `pipeline build`)."""
        return f"--tp {self.tp}" + (f" --pp {self.pp}" if self.pp > 1 else "") + f" --quant {self.quant} --kv-cache {self.kv_cache}"


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
    micro_batches: int = 1  # pipeline stages: the micro-batches in flight, which share the sequences and the KV cache

    @property
    def sequences_per_micro_batch(self) -> int:
        """One micro-batch's share of the sequences (all of them without pipeline stages)."""
        return self.max_sequences // self.micro_batches

    @property
    def kv_tokens_per_micro_batch(self) -> int:
        return self.kv_capacity_tokens // self.micro_batches


@lru_cache(maxsize=4096)
def memory_plan(
    scenario: Scenario,
    *,
    max_num_tokens: int = 8192,
    max_batch_size: int = 256,
    kv_fraction: float = DEFAULT_KV_FRACTION,
) -> MemoryPlan:
    """Per-GPU memory at these build limits: weights, reserve, the KV cache and the sequences it holds (with attention
    data parallelism, the GPU's own requests': every GPU holds as many; with pipeline stages, the fullest stage's GPU, whose
    sequences are the whole pipeline's)."""
    if scenario.pp > 1:
        stage = memory_plan(scenario.stage, max_num_tokens=max_num_tokens, max_batch_size=max_batch_size, kv_fraction=kv_fraction)
        return stage.model_copy(update={"micro_batches": scenario.pp})
    model, gpu, quant, kv, tp = scenario.model, scenario.gpu, scenario.quant, scenario.kv, scenario.tp
    total = (gpu.usable_memory_gib or 0) * GIB
    weights = weight_bytes_per_gpu(model, quant, tp, scenario.attention_dp)
    reserve = RUNTIME_RESERVE_GIB * GIB + activation_bytes(model, scenario.attention_tp, max_num_tokens, max_batch_size)
    free = max(0.0, total - weights - reserve)
    kv_cache = free * kv_fraction
    per_token = kv_bytes_per_token(model, kv, scenario.attention_tp)
    capacity = int(kv_cache // per_token)
    blocks_per_sequence = math.ceil((scenario.isl + scenario.osl) / TOKENS_PER_BLOCK)
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


def _alternative(scenario: Scenario) -> Alternative | None:
    """`scenario` as an alternative, when one ISL+OSL sequence fits it."""
    mem = memory_plan(scenario, max_num_tokens=2048, max_batch_size=8)
    if not mem.fits:
        return None
    return Alternative(tp=scenario.tp, quant=scenario.quant.name, kv_cache=scenario.kv.name, max_sequences=mem.max_sequences,
                       pp=scenario.pp)


def alternatives(scenario: Scenario) -> list[Alternative]:
    """Configurations that hold at least one ISL+OSL sequence: the smallest larger TP at this precision, and the
    shallowest deeper pipeline at this TP (neither on the CPU, whose reference runtime is one process), then smaller
    precisions (with an FP8 KV cache where the GPU runs one) at this split."""
    model, gpu, quant, kv, tp = scenario.model, scenario.gpu, scenario.quant, scenario.kv, scenario.tp

    def splits(size: int) -> bool:
        if scenario.attention_dp:  # DEP spreads the experts, not the heads
            return not model.num_experts % size
        return not model.num_heads % size and not (model.num_kv_heads % size and size % model.num_kv_heads)

    wider = [scenario.replace(tp=size) for size in (2, 4, 8, 16) if size > tp and splits(size)]
    # PCIe GPUs: stages pass far less over the link than TP
    deeper = [scenario.replace(pp=stages) for stages in (2, 4, 8) if scenario.pp < stages <= model.num_layers]
    found: list[Alternative] = []
    for candidates in (wider, deeper) if not gpu.is_cpu else ():
        first = next(filter(None, map(_alternative, candidates)), None)
        found += [first] if first else []
    current_bits = bits_per_weight(quant)
    fp8_kv = kv_cache_format("fp8")
    for name in ("fp8", "int8_wo", "int4_awq", "nvfp4"):
        other = quant_format(name)
        if gpu.can_run(other) and bits_per_weight(other) < current_bits:
            smaller = _alternative(scenario.replace(quant=other, kv=fp8_kv if gpu.can_run_kv(fp8_kv) else kv))
            found += [smaller] if smaller else []
    return found


def what_fits_hint(options: list[Alternative], tokens: int, gpu_key: str) -> str:
    """The one wording of a no-fit refusal's hint: the alternatives that hold a `tokens`-token sequence, or what to change."""
    if not options:
        return f"Shorten ISL+OSL ({tokens}) or choose a GPU with more memory than {gpu_key}."
    return "What fits: " + "; ".join(f"{a.flags()} ({a.max_sequences} sequences)" for a in options) + "."


def refuse_no_fit(scenario: Scenario) -> None:
    s = scenario
    raise UnsupportedError(
        f"{s.model.name} at {s.quant.name} on {s.tp}x {s.gpu.key}" + (f" in {s.pp} pipeline stages" if s.pp > 1 else "")
        + f" leaves no room for one {s.isl + s.osl}-token sequence.",
        hint=what_fits_hint(alternatives(s), s.isl + s.osl, s.gpu.key),
    )


def fitting_memory(scenario: Scenario, build: dict) -> MemoryPlan:
    """The memory plan of a recommended build (its max_num_tokens, max_batch_size and KV fraction); refuses,
    naming what would fit, when not even one ISL+OSL sequence fits."""
    memory = memory_plan(
        scenario, max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
        kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    if not memory.fits:
        refuse_no_fit(scenario)
    return memory

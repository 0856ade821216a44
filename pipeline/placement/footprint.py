"""What a convert or evaluate job holds in memory, from config.json alone (pipeline.placement decides
where it runs from these figures): the job, its footprint, and the model's shape."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.planner import ModelSpec, weight_bytes_per_gpu
from pipeline.core.quant import WEIGHTS_PACKED_AT_BUILD, QuantFormat, quant_format

Device = Literal["auto", "cuda", "cpu"]
DEVICES: tuple[str, ...] = ("auto", "cuda", "cpu")

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# The process itself: Python, torch, transformers, ModelOpt, the tokenizer. Measured here: 0.49 GiB
# peak RSS for a no-op convert (scripts/bench_scale.py), so 1 GiB with room for the tokenizer and buffers.
RUNTIME_RAM_BYTES = 1 << 30
# Per GPU: the CUDA context and the caching allocator's slack.
GPU_RESERVE_BYTES = 1 << 30
GPU_RESERVE_FRACTION = 0.05
# --device auto offloads to host RAM only while the GPUs keep at least half of the weights.
AUTO_MAX_OFFLOAD = 0.5


class Footprint(BaseModel):
    """What a job holds in memory, from config.json alone (bytes)."""

    model_config = ConfigDict(frozen=True)

    params: int
    load_dtype: str
    weights: int  # the whole model at the load dtype
    per_sample: int  # activations of one sample of seq_len tokens in one forward pass
    per_forward: int  # activations independent of the batch (a fake-quantized weight copy)
    export_transient: int  # export buffers beside the model (merged and packed copies), where it runs
    export_rank_host: int  # host RAM for one exported rank when the model is on GPUs
    checkpoint: int  # bytes convert writes (all ranks)
    runtime: int = RUNTIME_RAM_BYTES
    seq_len: int

    def activations(self, batch: int) -> int:
        return self.per_forward + batch * self.per_sample

    @property
    def export_ratio(self) -> float:
        """Export buffers per byte of weights on the device that holds them."""
        return self.export_transient / self.weights if self.weights else 0.0


class Job(BaseModel):
    """The job whose footprint is estimated."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["convert", "evaluate"] = "convert"
    load_dtype: str = "float16"
    quant: str = "fp16"  # the format calibrated / exported (evaluate: the most demanding variant)
    quantized: bool = False  # any ModelOpt quantizer runs (weights, activations or KV cache)
    tp: int = 1
    pp: int = 1
    samples: int = 0  # calibration (or scoring) samples; 0 = no forward pass
    seq_len: int = 256
    batch_size: int = Field(4, ge=0)  # 0: as many as fit
    passes: int = 1  # forward passes over the samples (AWQ calibrates twice; evaluate scores each variant)


# ----------------------------------------------------------------------------------------------
# Estimate

# GPT-2-style config names for the Llama-style ones the planner's ModelSpec reads.
_CONFIG_ALIASES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
                   "n_inner": "intermediate_size", "n_positions": "max_position_embeddings"}


def model_shape(path: str | Path) -> ModelSpec:
    """The planner's ModelSpec (pipeline.planner) of an HF folder or config.json, GPT-2's names included."""
    import json

    from pipeline.planner import model_spec_from_config, model_spec_from_dict

    config_file = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return model_spec_from_config(path)  # says what is wrong with it
    if not isinstance(raw, dict):
        return model_spec_from_config(path)
    missing = {new: raw[old] for old, new in _CONFIG_ALIASES.items() if raw.get(new) is None and raw.get(old) is not None}
    return model_spec_from_dict({**raw, **missing}, config_file.parent.name, source=str(config_file))


def footprint(model: ModelSpec, job: Job) -> Footprint:
    """Bytes the job holds, from the model's shapes.

    - weights: every parameter at the load dtype.
    - activations per sample (no gradients): residual stream, norms, attention and MLP outputs
      (4 x hidden), Q/K/V, the MLP's gate, up and product (3 x intermediate), the input copy ModelOpt's
      fake quantizer makes for a linear (2 x max(hidden, intermediate)), the logits of every position
      (vocab), and the attention scores and probabilities (heads x seq^2 x 2) the CPU's attention
      materialises; per forward pass, one fake-quantized copy of the largest weight in fp32.
    - export buffers (ModelOpt 0.47's `torch_to_tensorrt_llm_checkpoint` builds every layer's
      config before writing): the fused QKV copy of every layer and an lm_head copy, and for quantized
      formats the fused gate/up copies and the packed weights (half counted: packing frees the fused
      copies as it goes). On the 1B scale model (scripts/bench_scale.py) the whole estimate said 3.43
      GiB (fp16) and 5.19 GiB (fp8) for a measured peak RSS of 2.90 and 4.56 GiB.
    """
    b = DTYPE_BYTES.get(job.load_dtype, 2)
    h, i, v, s = model.hidden_size, model.intermediate_size, model.vocab_size, job.seq_len
    q = model.num_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    weights = model.param_count * b
    per_sample = s * b * (4 * h + q + 2 * kv + 3 * i * model.experts_per_token + 2 * max(h, i) + v)
    per_sample += model.num_heads * s * s * b * 2
    per_forward = max(h * i, h * q) * 4 * 2 if job.quantized else 0
    fmt = quant_format(job.quant)
    sixteen = 2
    qkv = model.num_layers * (q + 2 * kv) * h * sixteen
    head_copy = model.vocab_size * h * sixteen
    transient = 0
    if job.kind == "convert":
        transient = qkv + head_copy
        if _packed(fmt):
            gate_up = model.num_layers * model.num_experts * 2 * i * h * sixteen
            transient += gate_up + _checkpoint_bytes(model, fmt, 1) // 2
    checkpoint = _checkpoint_bytes(model, fmt, job.tp) * job.pp if job.kind == "convert" else 0
    rank_host = checkpoint // max(1, job.tp * job.pp) if job.kind == "convert" else 0
    return Footprint(params=model.param_count, load_dtype=job.load_dtype, weights=weights, per_sample=per_sample,
                     per_forward=per_forward, export_transient=transient, export_rank_host=rank_host,
                     checkpoint=checkpoint, seq_len=s)


def _packed(fmt: QuantFormat) -> bool:
    """Weights ModelOpt quantizes and packs at export (int4_wo stays 16-bit: trtllm-build packs it)."""
    return fmt.is_quantized and fmt.name not in WEIGHTS_PACKED_AT_BUILD


def _checkpoint_bytes(model: ModelSpec, fmt: QuantFormat, tp: int) -> int:
    """The TensorRT-LLM checkpoint on disk: every rank's weights (the embedding is in each rank),
    16-bit for formats ModelOpt does not pack, plus an lm_head of its own when the embeddings are tied."""
    stored = fmt if _packed(fmt) else quant_format("fp16")
    per_rank = weight_bytes_per_gpu(model, stored, tp)
    if model.tie_word_embeddings:
        per_rank += model.vocab_size * model.hidden_size * 2 // tp
    return int(per_rank * tp)

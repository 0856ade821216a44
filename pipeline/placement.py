"""Where convert and evaluate put the model, decided before anything loads, from config.json alone.

`footprint` estimates what a job holds in memory: the weights at the load dtype, the activations
of one calibration (or scoring) forward pass per sample, the export buffers ModelOpt's TensorRT-LLM
export adds, and the process itself. `place` compares that with this machine's free RAM and each
GPU's free memory (pipeline.resources) for `--device auto|cuda|cpu`:

- cuda: every visible GPU through accelerate's `device_map="auto"`, each capped (`max_memory`) so
  the activations and export buffers still fit beside its share of the weights; what does not fit
  on the GPUs is offloaded to host RAM when that has room (as NVIDIA's quantize script allows with
  `device_map="auto"`).
- cpu: the whole job in host RAM (the path the tests run here).
- auto: cuda when a GPU is visible and the model fits it, else the CPU with a warning that says how
  long the CPU will take (its matmul rate in the load dtype, measured in a fraction of a second).

The calibration batch is the one asked for (`--calib-batch-size`; 0 = as many as fit) capped by the
memory left after the weights. A job that fits nowhere is refused (exit 2) with the figures and what
would fit: `--device`, more GPUs, a smaller `--calib-batch-size`, or a machine with N GiB.

How the model is loaded on a GPU follows NVIDIA's own script (TensorRT-LLM
`tensorrt_llm/quantization/quantize_by_modelopt.py` @042c510d, `get_model`:
`from_pretrained(ckpt, device_map="auto" unless device == "cpu", torch_dtype=...)`; the calibration
batches are moved to `model.device`, an out-of-memory batch is split in two, and the accelerate hooks
are removed before `export_tensorrt_llm_checkpoint`): see `from_pretrained_kwargs` and
pipeline.quantize.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import InvalidInputError, UnsupportedError
from pipeline.planner import ModelSpec, weight_bytes_per_gpu
from pipeline.quant import WEIGHTS_PACKED_AT_BUILD, QuantFormat, quant_format
from pipeline.resources import GIB, GpuMemory, Machine

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
# Load and export on the CPU, seconds per byte of weights (float16 1B model: load 0.5 s + export 8.9 s
# for 2.0 GiB on 2 busy cores, scripts/bench_scale.py; 4 s/GiB): the part of the time that is not matmuls.
CPU_IO_SECONDS_PER_BYTE = 4.0 / GIB


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


class Placement(BaseModel):
    """The decision: device, accelerate's max_memory, the forward batch, and the figures behind it."""

    model_config = ConfigDict(frozen=True)

    asked: str
    device: Literal["cpu", "cuda"]
    gpus: tuple[int, ...] = ()
    max_memory: dict[str, int] = {}  # accelerate's max_memory: GPU index (as text) or "cpu" -> bytes
    offload_bytes: int = 0
    batch_size: int
    footprint: Footprint
    needed: dict[str, int]  # "cpu" / "cuda:N" -> bytes this job needs there
    free: dict[str, int]  # the same keys -> bytes free when decided
    warning: Optional[str] = None
    estimate_s: Optional[float] = None  # CPU only: the time estimate the warning quotes

    def accelerate_max_memory(self) -> dict[int | str, int]:
        return {int(k) if k.isdigit() else k: v for k, v in self.max_memory.items()}

    def summary(self) -> dict:
        """What the manifest records."""
        return {
            "asked": self.asked, "device": self.device, "gpus": list(self.gpus), "max_memory": self.max_memory,
            "offload_bytes": self.offload_bytes, "batch_size": self.batch_size,
            "needed_gib": {k: _gib(v) for k, v in self.needed.items()},
            "free_gib": {k: _gib(v) for k, v in self.free.items()},
            "estimate_s": self.estimate_s,
        }


# ----------------------------------------------------------------------------------------------
# Estimate

# GPT-2-style config names for the Llama-style ones the planner's ModelSpec reads.
_CONFIG_ALIASES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
                   "n_inner": "intermediate_size", "n_positions": "max_position_embeddings"}


def model_shape(path: str | Path) -> ModelSpec:
    """The planner's ModelSpec (pipeline.planner) of an HF folder or config.json, GPT-2's names included."""
    import json
    import tempfile

    from pipeline.planner import model_spec_from_config

    config_file = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return model_spec_from_config(path)  # says what is wrong with it
    missing = {new: raw[old] for old, new in _CONFIG_ALIASES.items() if raw.get(new) is None and raw.get(old) is not None}
    if not missing:
        return model_spec_from_config(path)
    with tempfile.TemporaryDirectory() as folder:
        named = Path(folder) / config_file.parent.name
        named.mkdir()
        (named / "config.json").write_text(json.dumps({**raw, **missing}), encoding="utf-8")
        return model_spec_from_config(named)


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


# ----------------------------------------------------------------------------------------------
# Decide


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise InvalidInputError(f"Unknown --device {device!r}.", hint=f"Use one of: {', '.join(DEVICES)}.")


def place(
    model: ModelSpec, job: Job, here: Machine, device: str, *, name: str = "the model",
    rates: Optional[tuple[float, float]] = None,
) -> Placement:
    """Decide where the job runs, or refuse (UnsupportedError, exit 2) with the figures. `rates`
    (matmul FLOP/s, reductions/s) replace the CPU probe behind the time estimate."""
    check_device(device)
    fp = footprint(model, job)
    if device == "cuda" and not here.gpus:
        raise UnsupportedError(
            f"--device cuda: no GPU here ({here.cuda_note or 'none found'}).",
            hint=_alternatives(model, job, here, exclude="cuda"),
        )
    gpu = _on_gpus(fp, job, here) if here.gpus and device in ("auto", "cuda") else None
    # auto offloads only while the GPUs hold most of the weights: streaming the rest each batch beats the CPU
    if gpu is not None and gpu.fits and (device == "cuda" or gpu.offload <= fp.weights * AUTO_MAX_OFFLOAD):
        return gpu.placement(device, fp, here)
    if device == "cuda" or (device == "auto" and here.gpus and gpu is not None and _cpu_batch(fp, job, here) < 1):
        raise UnsupportedError(_gpu_refusal(fp, job, here, name, gpu), hint=_alternatives(model, job, here, exclude="cuda"))
    batch = _cpu_batch(fp, job, here)
    if batch < 1:
        raise UnsupportedError(_cpu_refusal(fp, job, here, name), hint=_alternatives(model, job, here, exclude="cpu"))
    warning, estimate = None, None
    if device == "auto":
        rates = rates or cpu_rates(job.load_dtype, model.hidden_size, model.intermediate_size)
        estimate = cpu_seconds(model, job, batch, rates)
        why = here.cuda_note or "no GPU found"
        if here.gpus:
            why = f"the model does not fit the GPUs ({_gpu_short(here)})"
        warning = (f"no GPU for {name} ({why}): running on the CPU, which will take about {duration_text(estimate)} "
                   f"({_estimate_basis(model, job, batch, rates[0])}). `--device cuda` on a GPU machine takes minutes.")
    needed = {"cpu": _cpu_need(fp, batch)}
    return Placement(asked=device, device="cpu", batch_size=batch, footprint=fp, needed=needed,
                     free={"cpu": here.free_ram_bytes}, warning=warning, estimate_s=estimate)


def target_batch(job: Job) -> int:
    """The batch asked for; 0 means as many as fit, up to the number of samples."""
    return job.batch_size if job.batch_size > 0 else max(1, job.samples)


def cpu_need(model: ModelSpec, job: Job) -> int:
    """Host RAM the job needs on the CPU at batch 1."""
    return _cpu_need(footprint(model, job), 1)


def _cpu_need(fp: Footprint, batch: int) -> int:
    return fp.runtime + fp.weights + fp.export_transient + fp.activations(batch)


def _cpu_batch(fp: Footprint, job: Job, here: Machine) -> int:
    """The largest batch up to the one asked for that fits host RAM (0 when not even 1 fits)."""
    left = here.free_ram_bytes - _cpu_need(fp, 0)
    return _batch_in(left, fp, job)


def _batch_in(left: int, fp: Footprint, job: Job) -> int:
    if left < 0:
        return 0
    if job.samples == 0:
        return max(1, target_batch(job))  # no forward pass: the batch size is moot
    return min(target_batch(job), left // max(1, fp.per_sample))


class _GpuPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    fits: bool
    batch: int
    caps: dict[int, int]  # GPU index -> most weight bytes it may hold
    offload: int
    host_need: int
    usable: dict[int, int]

    def placement(self, asked: str, fp: Footprint, here: Machine) -> Placement:
        max_memory = {str(k): v for k, v in self.caps.items()}
        if self.offload:
            max_memory["cpu"] = max(0, here.free_ram_bytes - fp.runtime - fp.export_rank_host)
        needed = {f"cuda:{g.index}": min(self.caps[g.index], fp.weights) + int(min(self.caps[g.index], fp.weights) * fp.export_ratio)
                  + fp.activations(self.batch) + _reserve(g) for g in here.gpus}
        needed["cpu"] = self.host_need
        free = {f"cuda:{g.index}": g.free_bytes for g in here.gpus} | {"cpu": here.free_ram_bytes}
        warning = None
        if self.offload:
            warning = (f"{_gib(self.offload)} GiB of the weights do not fit the GPUs and are offloaded to host RAM: "
                       "calibration streams them to the GPU for every batch (slower).")
        return Placement(asked=asked, device="cuda", gpus=tuple(g.index for g in here.gpus), max_memory=max_memory,
                         offload_bytes=self.offload, batch_size=self.batch, footprint=fp, needed=needed, free=free,
                         warning=warning)


def _reserve(gpu: GpuMemory) -> int:
    return GPU_RESERVE_BYTES + int(GPU_RESERVE_FRACTION * gpu.total_bytes)


def _caps(fp: Footprint, usable: dict[int, int], batch: int) -> dict[int, int]:
    """Weight bytes each GPU may hold so its activations and export buffers still fit beside them."""
    act = fp.activations(batch)
    return {index: max(0, int((room - act) / (1 + fp.export_ratio))) for index, room in usable.items()}


def _on_gpus(fp: Footprint, job: Job, here: Machine) -> _GpuPlan:
    usable = {g.index: max(0, g.free_bytes - _reserve(g)) for g in here.gpus}
    host_base = fp.runtime + fp.export_rank_host
    want = target_batch(job) if job.samples else 1
    for batch in _descending(want):  # the largest batch that keeps every weight on the GPUs
        caps = _caps(fp, usable, batch)
        if sum(caps.values()) >= fp.weights and min(usable.values()) >= fp.activations(batch):
            return _GpuPlan(fits=here.free_ram_bytes >= host_base, batch=batch, caps=caps, offload=0,
                            host_need=host_base, usable=usable)
    # Offload: the GPUs keep half their room for activations, the rest of the weights go to host RAM.
    batch = max(1, min(want, min(usable.values()) // 2 // max(1, fp.per_sample))) if job.samples else 1
    caps = _caps(fp, usable, batch)
    offload = max(0, fp.weights - sum(caps.values()))
    host_need = host_base + int(offload * (1 + fp.export_ratio))
    fits = min(usable.values()) >= fp.activations(batch) and sum(caps.values()) > 0 and here.free_ram_bytes >= host_need
    return _GpuPlan(fits=fits, batch=batch, caps=caps, offload=offload, host_need=host_need, usable=usable)


def _descending(start: int) -> list[int]:
    """start, then halvings down to 1 (a handful of candidates, not every integer)."""
    out, value = [], max(1, start)
    while value > 1:
        out.append(value)
        value //= 2
    return out + [1]


def batch_for_free_memory(placement: Placement, free_now: dict[int, int]) -> int:
    """After loading: the planned batch capped by what each GPU has left now (cudaMemGetInfo), keeping
    room for its share of the export buffers. The CPU's plan stands (its free memory does not yet show
    the lazily mapped weights)."""
    if placement.device != "cuda" or not free_now:
        return placement.batch_size
    fp = placement.footprint
    rooms = []
    for index, free in free_now.items():
        held = min(placement.max_memory.get(str(index), 0), fp.weights)
        rooms.append(free - int(held * fp.export_ratio) - fp.per_forward - GPU_RESERVE_BYTES // 2)
    fit = min(rooms) // max(1, fp.per_sample)
    return max(1, min(placement.batch_size, fit))


# ----------------------------------------------------------------------------------------------
# Time on the CPU


def cpu_seconds(model: ModelSpec, job: Job, batch: int, rates: Optional[tuple[float, float]] = None) -> float:
    """Wall time on this CPU, from two rates measured now in the load dtype (`cpu_rates`):

    - matmuls: 2 FLOPs per weight per token, up to samples x seq_len tokens per pass;
    - ModelOpt's max calibration: a min/max reduction over every weight in every forward pass
      (profiled: torch.max/min are a fifth of the demo's calibration on the CPU);
    - a fixed 20 s (ModelOpt's imports and quantizer insertion, the tokenizer) when ModelOpt runs,
      and loading plus export at CPU_IO_SECONDS_PER_BYTE of weights.
    Checked against measured runs by scripts/bench_scale.py (it prints both)."""
    matmul_rate, reduce_rate = rates if rates is not None else cpu_rates(job.load_dtype, model.hidden_size, model.intermediate_size)
    tokens = job.samples * job.seq_len * job.passes
    flops = 2.0 * (model.active_params_per_token + model.vocab_size * model.hidden_size) * tokens
    forwards = math.ceil(job.samples / max(1, batch)) * job.passes if job.samples else (1 if job.quantized else 0)
    reductions = 2.0 * model.param_count * forwards if job.quantized else 0.0
    fixed = 20.0 if job.quantized else 0.0
    io = model.param_count * DTYPE_BYTES.get(job.load_dtype, 2) * CPU_IO_SECONDS_PER_BYTE
    return round(flops / matmul_rate + reductions / reduce_rate + fixed + io, 1)


_RATES: dict[tuple[str, int, int], tuple[float, float]] = {}


def cpu_rates(dtype: str, hidden: int, intermediate: int) -> tuple[float, float]:
    """(matmul FLOP/s, reduction elements/s) this CPU does now in dtype: a (256 x hidden) @
    (hidden x intermediate) matmul, the calibration's shape, and abs-max plus min over that weight,
    ModelOpt's amax. Under a second; remembered for the process."""
    import torch

    h, i = min(hidden, 4096), min(intermediate, 8192)
    key = (dtype, h, i)
    if key not in _RATES:
        torch_dtype = getattr(torch, dtype)
        a = torch.randn(256, h).to(torch_dtype)
        w = torch.randn(i, h).to(torch_dtype)
        with torch.no_grad():
            matmul = _best_time(lambda: torch.nn.functional.linear(a, w))
            reduce = _best_time(lambda: (torch.max(w.abs()), torch.min(w)))
        _RATES[key] = (2.0 * 256 * h * i / matmul, float(w.numel()) / reduce)
    return _RATES[key]


def _best_time(work) -> float:
    work()
    best, spent, runs = math.inf, 0.0, 0
    while runs < 2 or (spent < 0.3 and runs < 10):
        started = time.perf_counter()
        work()
        took = time.perf_counter() - started
        best, spent, runs = min(best, took), spent + took, runs + 1
    return max(best, 1e-9)


def _estimate_basis(model: ModelSpec, job: Job, batch: int, rate: float) -> str:
    work = f"{job.samples} x {job.seq_len} tokens" + (f" x {job.passes} passes" if job.passes > 1 else "")
    what = f"{model.param_count / 1e9:.2f}B parameters, {work}" if job.samples else f"{model.param_count / 1e9:.2f}B parameters"
    return f"{what}, batch {batch}, at the {rate / 1e9:.1f} GFLOP/s this CPU does in {job.load_dtype} now"


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# ----------------------------------------------------------------------------------------------
# Refusals


def _gib(value: float) -> float:
    return round(value / GIB, 2)


def _parts(fp: Footprint, job: Job, batch: int) -> str:
    act = f"calibration activations {_gib(fp.activations(batch))} GiB (batch {batch} x {fp.seq_len} tokens)"
    if job.kind == "evaluate":
        act = f"scoring activations {_gib(fp.activations(batch))} GiB (batch {batch} x {fp.seq_len} tokens)"
    if job.samples == 0:
        act = "no calibration"
    export = f" + export buffers {_gib(fp.export_transient)} GiB" if fp.export_transient else ""
    return (f"weights {_gib(fp.weights)} GiB ({fp.params / 1e9:.2f}B parameters in {fp.load_dtype}) + {act}{export} "
            f"+ runtime {_gib(fp.runtime)} GiB")


def _gpu_short(here: Machine) -> str:
    return ", ".join(f"cuda:{g.index} {g.name} {_gib(g.free_bytes)} GiB free" for g in here.gpus)


def _cpu_refusal(fp: Footprint, job: Job, here: Machine, name: str) -> str:
    return (f"{name} does not fit in host RAM: it needs {_gib(_cpu_need(fp, 1))} GiB on the CPU "
            f"({_parts(fp, job, 1)}); {_gib(here.free_ram_bytes)} GiB is free.")


def _gpu_refusal(fp: Footprint, job: Job, here: Machine, name: str, gpu: Optional[_GpuPlan]) -> str:
    usable = gpu.usable if gpu else {}
    per_gpu = fp.weights * (1 + fp.export_ratio)
    text = (f"{name} does not fit the GPUs: {_gib(per_gpu + fp.activations(1))} GiB in all "
            f"({_parts(fp, job, 1)}, export buffers on the GPUs); usable: "
            + ", ".join(f"cuda:{k} {_gib(v)} GiB" for k, v in usable.items()) + "")
    if gpu and gpu.offload:
        text += (f"; offloading the other {_gib(gpu.offload)} GiB needs {_gib(gpu.host_need)} GiB of host RAM, "
                 f"{_gib(here.free_ram_bytes)} GiB is free")
    return text + "."


def _alternatives(model: ModelSpec, job: Job, here: Machine, *, exclude: str) -> str:
    """What would work instead of the refused device, most practical first. The batch is already the
    largest that fits (down to 1), so the sequence length is the activation lever left."""
    fp = footprint(model, job)
    options = []
    if exclude != "cpu" and _cpu_batch(fp, job, here) >= 1:
        options.append(f"--device cpu (host RAM has room: {_gib(_cpu_need(fp, 1))} of {_gib(here.free_ram_bytes)} GiB; slow)")
    if exclude != "cuda" and here.gpus and _on_gpus(fp, job, here).fits:
        options.append("--device cuda")
    shorter = _shorter_sequence(model, job, here, exclude)
    if shorter:
        flag = "--max-len" if job.kind == "evaluate" else "--calib-max-len"
        options.append(f"{flag} {shorter} (activations grow with the square of the sequence)")
    if here.gpus:
        biggest = max(g.total_bytes for g in here.gpus)
        per = max(1, biggest - GPU_RESERVE_BYTES - int(GPU_RESERVE_FRACTION * biggest) - fp.activations(1))
        count = math.ceil(fp.weights * (1 + fp.export_ratio) / per)
        options.append(f"more GPUs: {count} x {_gib(biggest):g} GiB hold it")
    elif exclude != "cuda":
        gpu_need = fp.weights * (1 + fp.export_ratio) + fp.activations(1) + GPU_RESERVE_BYTES
        options.append(f"a GPU machine (about {math.ceil(gpu_need / GIB)} GiB of GPU memory in all, e.g. "
                       f"{math.ceil(gpu_need / (76 * GIB))} x H100 80GB)")
    else:
        options.append("--device auto (the GPUs where there are any, else the CPU)")
    if _cpu_need(fp, 1) > here.free_ram_bytes:
        options.append(f"a machine with {math.ceil(_cpu_need(fp, 1) / GIB)} GiB of free RAM")
    return "Would work: " + "; ".join(options) + "."


def _shorter_sequence(model: ModelSpec, job: Job, here: Machine, exclude: str) -> int:
    """The longest power-of-two sequence (64 or more, shorter than the one asked) with which the
    refused device fits (0 when none does, or when the job runs no forward pass)."""
    if not job.samples or (exclude == "cuda" and not here.gpus):
        return 0
    length = 1 << (max(64, job.seq_len - 1).bit_length() - 1)
    while length >= 64:
        shorter = job.model_copy(update={"seq_len": length})
        fp = footprint(model, shorter)
        fits = _cpu_batch(fp, shorter, here) >= 1 if exclude == "cpu" else _on_gpus(fp, shorter, here).fits
        if length < job.seq_len and fits:
            return length
        length //= 2
    return 0

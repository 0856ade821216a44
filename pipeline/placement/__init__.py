"""Where convert and evaluate put the model, decided before anything loads, from config.json alone.

`footprint` estimates what a job holds in memory: the weights at the load dtype, the activations
of one calibration (or scoring) forward pass per sample, the export buffers ModelOpt's TensorRT-LLM
export adds, and the process itself. `place` compares that with this machine's free RAM and each
GPU's free memory (pipeline.core.resources) for `--device auto|cuda|cpu`:

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
pipeline.quantization.modelopt.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.placement.footprint import (  # noqa: F401 (re-exported: pipeline.placement is the entry point)
    AUTO_MAX_OFFLOAD,
    DEVICES,
    DTYPE_BYTES,
    GPU_RESERVE_BYTES,
    GPU_RESERVE_FRACTION,
    RUNTIME_RAM_BYTES,
    Device,
    Footprint,
    Job,
    footprint,
    model_shape,
)
from pipeline.placement.timing import (  # noqa: F401 (re-exported)
    CPU_IO_SECONDS_PER_BYTE,
    _estimate_basis,
    cpu_rates,
    cpu_seconds,
    duration_text,
)
from pipeline.planner import ModelSpec
from pipeline.core.resources import GIB, GpuMemory, Machine


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

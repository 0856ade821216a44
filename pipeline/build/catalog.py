"""`pipeline profiles`: what each GPU x precision x backend can do for a model (like NIM's
list-model-profiles), with why a profile cannot be built and served on this machine."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipeline.build.checkpoint import is_converted_hf, read_source
from pipeline.build.flags import builder_restriction
from pipeline.build.memory import TP_CHOICES, EngineTarget, default_limits, estimate, what_would_fit
from pipeline.core.deployable import DEFAULT_BACKEND, HF_QUANT_FORMATS, PYTORCH_BACKEND, Backend
from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import get_gpu, gpu_table, pytorch_restriction
from pipeline.core.host import known_gpu_key
from pipeline.core.paths import stage_dir
from pipeline.planner import Goal
from pipeline.build.profiles import BuildProfile, engine_profile
from pipeline.core.quant import QUANT_FORMATS, kv_cache_format

ProfileStatus = Literal["runnable", "low-memory", "incompatible"]


class ProfileRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu: str
    quant: str
    kv_cache: str
    tp: int
    goal: Goal
    status: ProfileStatus
    name: str
    backend: Backend = DEFAULT_BACKEND
    reason: str = ""
    fix: str = ""
    weights_gib_per_gpu: float | None = None
    kv_capacity_sequences: int | None = None
    max_batch_size: int | None = None
    built: str | None = None  # profile id of an engine / deployable already under build/<model>/engines/
    here: str = ""  # why this profile cannot be built and served on this machine ("" = it can)
    needs: str = ""  # the step the given input still needs for this profile (a conversion), "" = none


class Machine(BaseModel):
    """What this machine has, for the `here` column: its GPU and the TensorRT-LLM tools."""

    model_config = ConfigDict(frozen=True)

    gpu: str = "cpu"
    trtllm_build: bool = False
    tensorrt_llm: bool = False

    @classmethod
    def detect(cls) -> Machine:
        return cls(gpu=known_gpu_key() or "unknown-gpu", trtllm_build=shutil.which("trtllm-build") is not None,
                   tensorrt_llm=importlib.util.find_spec("tensorrt_llm") is not None)

    def why_not(self, gpu: str, backend: Backend) -> str:
        if gpu == "cpu":
            return ""
        if self.gpu == "cpu":
            return "no GPU here"
        if self.gpu != gpu:
            return f"this machine's GPU is {self.gpu}"
        if backend == DEFAULT_BACKEND and not self.trtllm_build:
            return "no trtllm-build here (the pinned image has it)"
        if backend != DEFAULT_BACKEND and not self.tensorrt_llm:
            return "no tensorrt_llm here (the pinned image has it)"
        return ""


def _input_needs(info: Any, converted_hf: bool, backend: Backend, quant: str, gpu_is_cpu: bool) -> str:
    """The conversion the input still needs before `pipeline build` can make this profile ("" = none).
    converted_hf: the input is an HF checkpoint from `pipeline convert --format hf`."""
    convert = f"`pipeline convert --model {info.model} --quant {quant}"
    if backend == DEFAULT_BACKEND:
        if (gpu_is_cpu and info.kind == "hf" and not converted_hf) or (info.kind == "trtllm" and info.quant == quant):
            return ""  # the reference runtime serves an HF folder as it is; an engine builds from a matching checkpoint
        return f"a TensorRT-LLM checkpoint: {convert}`"
    if info.kind == "hf" and (info.quant == quant or gpu_is_cpu):
        return ""  # the reference runtime simulates a precision over 16-bit weights
    return f"an HF checkpoint: {convert} --format hf`"


def list_profiles(
    model_source: Path, *, model: str | None = None, gpus: list[str] | None = None, goal: Goal = "throughput",
    max_seq_len: int | None = None, machine: Machine | None = None,
) -> list[ProfileRow]:
    """Each GPU (all in the table, or the given keys) x weight precision x backend (tensorrt engine,
    PyTorch backend), at tp 1 (or the smallest tp that fits, reported as the fix); `here` says why a
    profile cannot be built and served on this machine, `needs` what the given input still needs."""
    info = read_source(model_source, model=model)
    converted_hf = is_converted_hf(info.path)
    machine = machine or Machine.detect()
    built = _built_profiles(stage_dir(info.model, "engines"))
    keys = [get_gpu(k).key for k in gpus] if gpus else list(gpu_table())
    kv = kv_cache_format(None)
    rows: list[ProfileRow] = []
    for key in keys:
        gpu = get_gpu(key)
        formats = [QUANT_FORMATS["fp16"]] if gpu.is_cpu else list(QUANT_FORMATS.values())
        for backend in (DEFAULT_BACKEND, PYTORCH_BACKEND):
            for quant in formats:
                base = dict(gpu=gpu.key, quant=quant.name, kv_cache=kv.name, goal=goal, backend=backend,
                            here=machine.why_not(gpu.key, backend),
                            needs=_input_needs(info, converted_hf, backend, quant.name, gpu.is_cpu))
                name = BuildProfile(model=info.model, model_revision=info.revision, runtime=gpu.runtime, gpu=gpu.key,
                                    quant=quant.name, goal=goal, backend=backend).name
                if not gpu.can_run(quant):
                    rows.append(ProfileRow(**base, tp=1, status="incompatible", name=name,
                                           reason=f"{quant.name} needs SM {quant.min_compute_capability:g}+ "
                                           f"({gpu.key} is SM {gpu.compute_capability})",
                                           fix=f"on {gpu.key}: {', '.join(gpu.weight_precisions)}"))
                    continue
                if backend == PYTORCH_BACKEND and quant.name not in HF_QUANT_FORMATS:
                    rows.append(ProfileRow(**base, tp=1, status="incompatible", name=name,
                                           reason=f"the PyTorch-backend path loads {', '.join(HF_QUANT_FORMATS)} "
                                           "(`pipeline convert --format hf`)",
                                           fix=f"--backend tensorrt for {quant.name}"))
                    continue
                restriction = (builder_restriction(gpu, quant, kv) if backend == DEFAULT_BACKEND
                               else pytorch_restriction(gpu, quant, kv))
                if restriction:
                    rows.append(ProfileRow(**base, tp=1, status="incompatible", name=name, reason=restriction,
                                           fix="fp8 or nvfp4 weights"))
                    continue
                target = EngineTarget(info.shape, gpu, quant, kv, 1, 1, goal)
                rows.append(_sized_row(target, max_seq_len, base, name, built))
    return rows


def _sized_row(target: EngineTarget, max_seq_len: int | None, base: dict[str, Any], name: str,
               built: dict[str, str]) -> ProfileRow:
    """The smallest tp at which the profile fits, with its memory figures (or why nothing fits)."""
    gpu = target.gpu
    for tp in [t for t in TP_CHOICES if target.model.num_heads % t == 0] if not gpu.is_cpu else [1]:
        at_tp = replace(target, tp=tp)
        try:
            limits = default_limits(at_tp, max_seq_len=max_seq_len)
        except UnsupportedError as refused:
            return ProfileRow(**base, tp=tp, status="incompatible", name=name, reason=refused.message,
                              fix=refused.hint or "")
        est = estimate(at_tp, limits)
        if not est.fits:
            continue
        tp_name = name.replace("-tp1-", f"-tp{tp}-")
        fix = "" if tp == 1 else f"needs --tp {tp} ({tp} x {gpu.key}{'' if gpu.nvlink else ', over PCIe'})"
        status: ProfileStatus = "runnable"
        if est.low_memory:
            status = "low-memory"
            ideas = what_would_fit(at_tp, limits, roomy=True)
            fix = "; ".join(filter(None, [fix, " or ".join(ideas[:3]) or "shorter --max-seq-len"]))
        return ProfileRow(**base, tp=tp, status=status, name=tp_name, fix=fix,
                          weights_gib_per_gpu=est.weights_gib, kv_capacity_sequences=est.max_full_sequences,
                          max_batch_size=limits.max_batch_size, built=built.get(tp_name))
    return ProfileRow(**base, tp=1, status="incompatible", name=name,
                      reason=f"does not fit in {gpu.memory_gib:g} GiB even at tp {max(TP_CHOICES)}",
                      fix="a smaller precision or a GPU with more memory")


def _built_profiles(engines: Path) -> dict[str, str]:
    """Readable profile name -> profile id of engines already built for the model."""
    found: dict[str, str] = {}
    for folder in sorted(engines.glob("*")) if engines.is_dir() else []:
        profile = engine_profile(folder)
        if profile is not None and not folder.name.startswith("."):
            found[profile.name] = profile.id
    return found

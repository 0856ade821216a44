"""What both build backends share (pipeline/build/__init__.py builds engines, pipeline/build/pytorch.py
PyTorch-backend deployables): the plan's common fields, finding the model folder, the memory pre-check, the
cache check and the manifest origin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.artifacts import ArtifactOrigin, reusable, read_manifest
from pipeline.hf.sources import parse_source
from pipeline.build.lora_build import LoraPlan
from pipeline.build.memory import EngineTarget, Limits, MemoryEstimate, estimate, what_would_fit
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.paths import build_root
from pipeline.build.profiles import BuildProfile


class PlannedProfile(BaseModel):
    """What every build plan decides: the profile, the GPU, the input, the limits and the memory estimate."""

    model_config = ConfigDict(frozen=True)

    profile: BuildProfile
    profile_id: str
    profile_name: str
    gpu: dict[str, Any]
    checkpoint: Path
    limits: Limits
    memory: MemoryEstimate
    inputs_hash: str
    notes: list[str] = []
    lora: LoraPlan | None = None  # --lora: the adapters, checked (pipeline/build/lora_build.py)
    slo_plan: dict[str, Any] | None = None  # --slo: the SLO choice the limits come from (pipeline/build/slo.py)


def model_folder_name(model: str) -> str:
    """build/<model>: the name itself when that folder exists, else the folder `pipeline download`
    gives the source (so `--model demo` or `--model hf:org/name` find what download/convert wrote)."""
    if (build_root() / model).is_dir():
        return model
    try:
        return parse_source(model).model
    except InvalidInputError:
        return model


def check_fits(name: str, target: EngineTarget, limits: Limits, lora_bytes: int = 0) -> tuple[MemoryEstimate, list[str]]:
    """The memory estimate of model `name` (with a LoRA cache of lora_bytes); refuses (with what would fit) a model
    that does not fit, notes low memory."""
    notes: list[str] = []
    gpu, quant, kv, tp, pp = target.gpu, target.quant, target.kv, target.tp, target.pp
    memory = estimate(target, limits, lora_bytes)
    if not memory.fits:
        ideas = what_would_fit(target, limits)
        raise UnsupportedError(
            f"{name} ({quant.name}, KV {kv.name}, tp {tp}, pp {pp}) does not fit on {gpu.key}: it needs "
            f"~{memory.needed_gib:.1f} GiB per GPU (weights {memory.weights_gib:.1f}, activations "
            f"{memory.activation_gib:.1f}, runtime reserve {memory.overhead_gib:.1f}, LoRA cache {memory.lora_cache_gib:.2f}, "
            f"one {limits.max_seq_len}-token sequence "
            f"{memory.kv_one_sequence_gib:.2f}) of {memory.gpu_memory_gib:.1f} GiB.",
            hint=("What would fit: " + "; ".join(ideas) + ".") if ideas else "Nothing in reach fits: use a bigger GPU or a smaller model.",
        )
    if memory.low_memory:
        ideas = what_would_fit(target, limits, roomy=True)
        notes.append(f"low memory: the KV cache holds only {memory.max_full_sequences} sequence(s) of {limits.max_seq_len} "
                     f"tokens{'; more room with ' + ' or '.join(ideas[:3]) if ideas else ''}")
    return memory, notes


def cached(engine_dir: Path, inputs_hash: str) -> bool:
    """Same inputs and every recorded file intact (size and mtime; hashed with `pipeline --verify`)."""
    return reusable(engine_dir, inputs_hash) and bool((read_manifest(engine_dir) or {}).get("files"))


def build_origin(plan: PlannedProfile) -> ArtifactOrigin:
    """A build's manifest origin (an engine or a PyTorch deployable): its checkpoint and profile, hashed
    with everything the plan decided."""
    return ArtifactOrigin("build", {"checkpoint": str(plan.checkpoint), "profile_id": plan.profile_id}, plan.inputs_hash)

"""Build profiles: everything that decides an engine, with a content-hash id and a readable name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.artifacts import short_hash
from pipeline.errors import InvalidInputError, UnsupportedError
from pipeline.versions import TRTLLM_VERSION

Goal = Literal["latency", "throughput"]
Runtime = Literal["tensorrtllm", "reference"]


class BuildProfile(BaseModel):
    """Frozen and validated once; passed whole between build, render and k8s."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="model folder name under build/")
    model_revision: str = Field(description="hash of the source checkpoint (its manifest's inputs or files)")
    runtime: Runtime
    gpu: str = Field(description="GPU table key, or 'cpu' for the reference runtime")
    compute_capability: str | None = None
    quant: str = "fp16"
    kv_cache: str = "auto"
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    goal: Goal = "latency"
    max_input_len: int = Field(1024, ge=1)
    max_seq_len: int = Field(2048, ge=2)
    max_batch_size: int = Field(8, ge=1)
    max_num_tokens: int = Field(8192, ge=1)
    trtllm_version: str = TRTLLM_VERSION

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def id(self) -> str:
        return short_hash(self.model_dump(mode="json"), 12)

    @property
    def name(self) -> str:
        prefix = "trtllm" if self.runtime == "tensorrtllm" else "ref"
        kv = "" if self.kv_cache == "auto" else f"-kv{self.kv_cache}"
        pp = "" if self.pp == 1 else f"-pp{self.pp}"
        return f"{prefix}-{self.gpu}-{self.quant}{kv}-tp{self.tp}{pp}-{self.goal}"


# ---------------------------------------------------------------------------------------------
# Engines on disk: which profile built them, and whether this environment can run them
# ---------------------------------------------------------------------------------------------


def engine_profile(engine_dir: Path) -> BuildProfile | None:
    """The profile recorded in an engine folder's manifest (None for an engine built elsewhere)."""
    from pipeline.artifacts import read_manifest

    manifest = read_manifest(Path(engine_dir)) or {}
    raw = manifest.get("profile")
    if not isinstance(raw, dict):
        return None
    try:
        return BuildProfile(**raw)
    except ValueError:
        return None


def _engine_config(engine_dir: Path) -> dict[str, Any]:
    path = Path(engine_dir) / "config.json"
    if not path.is_file():
        raise InvalidInputError(
            f"{engine_dir} is not an engine folder (no config.json).",
            hint="Point at build/<model>/engines/<profile-id>/ as written by `pipeline build`.",
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidInputError(f"Cannot read {path}: {error}.", hint="Build the engine again.") from None


def check_engine_compatible(
    engine_dir: Path, gpu_key: str | None = None, trtllm_version: str | None = None
) -> BuildProfile | None:
    """Refuse an engine this environment cannot run; return its recorded profile (None if unrecorded).

    gpu_key: the GPU here (a table key or alias; "cpu" for none); None skips the GPU check.
    trtllm_version: the TensorRT-LLM here; None means the pinned TRTLLM_VERSION.
    A reference-runtime engine runs anywhere. A TensorRT engine is refused on the CPU, on a GPU of
    another compute capability (TensorRT engines are built per architecture), and under another
    TensorRT-LLM version (engines only load under the version that built them).
    """
    from pipeline.gpus import get_gpu

    config = _engine_config(engine_dir)
    profile = engine_profile(engine_dir)
    runtime = config.get("runtime") or (profile.runtime if profile else "tensorrtllm")
    if runtime == "reference":
        return profile
    here_version = trtllm_version or TRTLLM_VERSION
    built_version = profile.trtllm_version if profile else str(config.get("version") or "")
    if built_version and built_version != here_version:
        raise UnsupportedError(
            f"The engine in {engine_dir} was built with TensorRT-LLM {built_version}; this environment has "
            f"{here_version}. TensorRT engines only load under the version that built them.",
            hint=f"Rebuild it here (`pipeline build ... --force`) or serve it in the image that built it "
            f"(TensorRT-LLM {built_version}).",
        )
    if gpu_key is None:
        return profile
    here = get_gpu(gpu_key)
    if here.is_cpu:
        raise UnsupportedError(
            f"The engine in {engine_dir} is a TensorRT engine{f' for {profile.gpu}' if profile else ''}; it needs an "
            "NVIDIA GPU and there is none here.",
            hint="Build a reference-runtime engine for this machine: `pipeline build --gpu cpu ...`.",
        )
    if profile is not None and profile.compute_capability and profile.compute_capability != here.compute_capability:
        built_on = get_gpu(profile.gpu) if profile.gpu else None
        raise UnsupportedError(
            f"The engine in {engine_dir} was built for {profile.gpu} (SM {profile.compute_capability}"
            f"{f', {built_on.architecture}' if built_on else ''}); this GPU is {here.key} (SM {here.compute_capability}, "
            f"{here.architecture}). TensorRT engines only run on the architecture they were built for.",
            hint=f"Build for this GPU: `pipeline build --gpu {here.key} ...` (same checkpoint).",
        )
    return profile


# ---------------------------------------------------------------------------------------------
# `pipeline profiles`: what each GPU x precision can do for a model (like NIM's list-model-profiles)
# ---------------------------------------------------------------------------------------------

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
    reason: str = ""
    fix: str = ""
    weights_gib_per_gpu: float | None = None
    kv_capacity_sequences: int | None = None
    max_batch_size: int | None = None
    built: str | None = None  # profile id of an engine already under build/<model>/engines/


def list_profiles(
    model_source: Path, *, model: str | None = None, gpus: list[str] | None = None, goal: Goal = "throughput",
    max_seq_len: int | None = None,
) -> list[ProfileRow]:
    """Each GPU (all in the table, or the given keys) x weight precision, at tp 1 (or the smallest tp
    that fits, reported as the fix)."""
    from pipeline.build.checkpoint import read_checkpoint
    from pipeline.build.flags import builder_restriction
    from pipeline.build.memory import TP_CHOICES, default_limits, estimate, what_would_fit
    from pipeline.gpus import get_gpu, gpu_table
    from pipeline.paths import stage_dir
    from pipeline.quant import QUANT_FORMATS, kv_cache_format

    info = read_checkpoint(model_source, model=model)
    built = _built_profiles(stage_dir(info.model, "engines"))
    keys = [get_gpu(k).key for k in gpus] if gpus else list(gpu_table())
    kv = kv_cache_format(None)
    rows: list[ProfileRow] = []
    for key in keys:
        gpu = get_gpu(key)
        formats = [QUANT_FORMATS["fp16"]] if gpu.is_cpu else list(QUANT_FORMATS.values())
        for quant in formats:
            base = dict(gpu=gpu.key, quant=quant.name, kv_cache=kv.name, goal=goal)
            name = BuildProfile(model=info.model, model_revision=info.revision, runtime=gpu.runtime, gpu=gpu.key,
                                quant=quant.name, goal=goal).name
            if not gpu.can_run(quant):
                rows.append(ProfileRow(**base, tp=1, status="incompatible", name=name,
                                       reason=f"{quant.name} needs SM {quant.min_compute_capability:g}+ "
                                       f"({gpu.key} is SM {gpu.compute_capability})",
                                       fix=f"on {gpu.key}: {', '.join(gpu.weight_precisions)}"))
                continue
            restriction = builder_restriction(gpu, quant, kv)
            if restriction:
                rows.append(ProfileRow(**base, tp=1, status="incompatible", name=name, reason=restriction,
                                       fix="fp8 or nvfp4 weights"))
                continue
            row = None
            for tp in [t for t in TP_CHOICES if info.shape.num_heads % t == 0] if not gpu.is_cpu else [1]:
                try:
                    limits = default_limits(info.shape, gpu, quant, kv, tp, 1, goal, max_seq_len=max_seq_len)
                except UnsupportedError as refused:
                    row = ProfileRow(**base, tp=tp, status="incompatible", name=name, reason=refused.message,
                                     fix=refused.hint or "")
                    break
                est = estimate(info.shape, gpu, quant, kv, tp, 1, limits)
                if not est.fits:
                    continue
                tp_name = name.replace("-tp1-", f"-tp{tp}-")
                fix = "" if tp == 1 else f"needs --tp {tp} ({tp} x {gpu.key}{'' if gpu.nvlink else ', over PCIe'})"
                status: ProfileStatus = "runnable"
                if est.low_memory:
                    status = "low-memory"
                    ideas = what_would_fit(info.shape, gpu, quant, kv, tp, 1, limits, roomy=True)
                    fix = "; ".join(filter(None, [fix, " or ".join(ideas[:3]) or "shorter --max-seq-len"]))
                row = ProfileRow(**base, tp=tp, status=status, name=tp_name, fix=fix,
                                 weights_gib_per_gpu=est.weights_gib, kv_capacity_sequences=est.max_full_sequences,
                                 max_batch_size=limits.max_batch_size, built=built.get(tp_name))
                break
            if row is None:
                row = ProfileRow(**base, tp=1, status="incompatible", name=name,
                                 reason=f"does not fit in {gpu.memory_gib:g} GiB even at tp {max(TP_CHOICES)}",
                                 fix="a smaller precision or a GPU with more memory")
            rows.append(row)
    return rows


def _built_profiles(engines: Path) -> dict[str, str]:
    """Readable profile name -> profile id of engines already built for the model."""
    found: dict[str, str] = {}
    for folder in sorted(engines.glob("*")) if engines.is_dir() else []:
        profile = engine_profile(folder)
        if profile is not None and not folder.name.startswith("."):
            found[profile.name] = profile.id
    return found

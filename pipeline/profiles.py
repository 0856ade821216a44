"""Build profiles: everything that decides an engine, with a content-hash id and a readable name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.artifacts import short_hash
from pipeline.deployable import DEFAULT_BACKEND, Backend
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
    backend: Backend = Field(DEFAULT_BACKEND, description="tensorrt (an engine) or pytorch (LLM-API options + HF checkpoint)")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    def identity(self) -> dict[str, Any]:
        """The fields that identify the profile. The default backend is left out, so engine profiles keep
        the ids (and build caches) they had before the field existed."""
        fields = self.model_dump(mode="json")
        if self.backend == DEFAULT_BACKEND:
            del fields["backend"]
        return fields

    @property
    def id(self) -> str:
        return short_hash(self.identity(), 12)

    @property
    def name(self) -> str:
        """trtllm-<gpu>-... (engine), torch-<gpu>-... (PyTorch backend), ref-cpu-... (reference runtime;
        `-torch` at the end for the PyTorch-backend layout)."""
        torch = self.backend != DEFAULT_BACKEND
        prefix = "ref" if self.runtime == "reference" else "torch" if torch else "trtllm"
        kv = "" if self.kv_cache == "auto" else f"-kv{self.kv_cache}"
        pp = "" if self.pp == 1 else f"-pp{self.pp}"
        suffix = "-torch" if torch and self.runtime == "reference" else ""
        return f"{prefix}-{self.gpu}-{self.quant}{kv}-tp{self.tp}{pp}-{self.goal}{suffix}"


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
    from pipeline.deployable import is_pytorch_deployable
    from pipeline.gpus import get_gpu

    if is_pytorch_deployable(Path(engine_dir)):
        return _check_deployable_compatible(Path(engine_dir), gpu_key)
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


def _check_deployable_compatible(folder: Path, gpu_key: str | None) -> BuildProfile | None:
    """A PyTorch-backend deployable has no engine: it runs on any GPU that runs its precision (the LLM
    API loads the HF checkpoint there); a GPU deployable needs a GPU, a reference one runs anywhere."""
    from pipeline.gpus import check_precision, get_gpu
    from pipeline.quant import kv_cache_format, quant_format

    profile = engine_profile(folder)
    if gpu_key is None or profile is None or profile.runtime == "reference":
        return profile
    here = get_gpu(gpu_key)
    if here.is_cpu:
        raise UnsupportedError(
            f"The deployable in {folder} is for TensorRT-LLM's PyTorch backend on {profile.gpu}; it needs an NVIDIA GPU "
            "and there is none here.",
            hint="Build one for the reference runtime: `pipeline build --backend pytorch --gpu cpu --checkpoint ...`.",
        )
    check_precision(here, quant_format(profile.quant), kv_cache_format(profile.kv_cache))
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
    def detect(cls) -> "Machine":
        import importlib.util
        import shutil

        from pipeline.host import detect_gpu_key

        try:
            gpu = detect_gpu_key()
        except (InvalidInputError, UnsupportedError):  # a GPU the table does not know
            gpu = "unknown-gpu"
        return cls(gpu=gpu, trtllm_build=shutil.which("trtllm-build") is not None,
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
    from pipeline.build.checkpoint import is_converted_hf, read_source
    from pipeline.build.flags import builder_restriction
    from pipeline.deployable import HF_QUANT_FORMATS, PYTORCH_BACKEND
    from pipeline.gpus import get_gpu, gpu_table
    from pipeline.paths import stage_dir
    from pipeline.quant import QUANT_FORMATS, kv_cache_format

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
                restriction = builder_restriction(gpu, quant, kv) if backend == DEFAULT_BACKEND else None
                if restriction:
                    rows.append(ProfileRow(**base, tp=1, status="incompatible", name=name, reason=restriction,
                                           fix="fp8 or nvfp4 weights"))
                    continue
                rows.append(_sized_row(info, gpu, quant, kv, goal, max_seq_len, base, name, built))
    return rows


def _sized_row(info, gpu, quant, kv, goal, max_seq_len, base, name, built) -> ProfileRow:
    """The smallest tp at which the profile fits, with its memory figures (or why nothing fits)."""
    from pipeline.build.memory import TP_CHOICES as tp_choices, default_limits, estimate, what_would_fit

    for tp in [t for t in tp_choices if info.shape.num_heads % t == 0] if not gpu.is_cpu else [1]:
        try:
            limits = default_limits(info.shape, gpu, quant, kv, tp, 1, goal, max_seq_len=max_seq_len)
        except UnsupportedError as refused:
            return ProfileRow(**base, tp=tp, status="incompatible", name=name, reason=refused.message,
                              fix=refused.hint or "")
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
        return ProfileRow(**base, tp=tp, status=status, name=tp_name, fix=fix,
                          weights_gib_per_gpu=est.weights_gib, kv_capacity_sequences=est.max_full_sequences,
                          max_batch_size=limits.max_batch_size, built=built.get(tp_name))
    return ProfileRow(**base, tp=1, status="incompatible", name=name,
                      reason=f"does not fit in {gpu.memory_gib:g} GiB even at tp {max(tp_choices)}",
                      fix="a smaller precision or a GPU with more memory")


def _built_profiles(engines: Path) -> dict[str, str]:
    """Readable profile name -> profile id of engines already built for the model."""
    found: dict[str, str] = {}
    for folder in sorted(engines.glob("*")) if engines.is_dir() else []:
        profile = engine_profile(folder)
        if profile is not None and not folder.name.startswith("."):
            found[profile.name] = profile.id
    return found

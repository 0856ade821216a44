"""Build profiles: everything that decides an engine, with a content-hash id and a readable name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.core.artifacts import short_hash
from pipeline.core.deployable import DEFAULT_BACKEND, Backend
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.planner.scenario import Goal
from pipeline.core.versions import TRTLLM_VERSION

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
    lora: str | None = Field(None, description="a LoRA build: the hash of its adapters, rank and target modules")
    speculative: str | None = Field(None, description="speculative decoding, e.g. draft-target-k4-<draft> (None: off)")
    attention_dp: bool = Field(False, description="PyTorch backend: attention data parallelism, the experts over the tp GPUs")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    def identity(self) -> dict[str, Any]:
        """The fields that identify the profile. The default backend is left out, so engine profiles keep
        the ids (and build caches) they had before the field existed."""
        fields = self.model_dump(mode="json")
        if self.backend == DEFAULT_BACKEND:
            del fields["backend"]
        if self.lora is None:  # likewise: builds without adapters keep their ids
            del fields["lora"]
        if self.speculative is None:  # left out too: profiles without speculation keep their ids
            del fields["speculative"]
        if not self.attention_dp:  # and without attention data parallelism
            del fields["attention_dp"]
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
        lora = "" if self.lora is None else "-lora"
        spec = f"-spec-{self.speculative.split('-k')[0]}" if self.speculative else ""
        parallel = f"-dep{self.tp}" if self.attention_dp else f"-tp{self.tp}"
        return f"{prefix}-{self.gpu}-{self.quant}{kv}{parallel}{pp}-{self.goal}{lora}{spec}{suffix}"


# ---------------------------------------------------------------------------------------------
# Engines on disk: which profile built them, and whether this environment can run them
# ---------------------------------------------------------------------------------------------


def engine_profile(engine_dir: Path) -> BuildProfile | None:
    """The profile recorded in an engine folder's manifest (None for an engine built elsewhere)."""
    from pipeline.core.artifacts import read_manifest

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


def engine_built_version(engine_dir: Path) -> str | None:
    """The TensorRT-LLM version that built the engine, as trtllm-build recorded it: the top-level `version` of the
    engine's config.json (TensorRT-LLM 1.1.0 builder.py: `build` makes the EngineConfig with tensorrt_llm's
    __version__, Engine.save writes it to config.json, and get_engine_version reads this key back; read at v1.1.0
    through NVIDIA/TensorRT-LLM gh-pages @8660c119 1.1.0/_modules/tensorrt_llm/builder.html). None: not recorded."""
    version = _engine_config(engine_dir).get("version")
    return str(version) if version else None


def installed_trtllm_version() -> str | None:
    """The TensorRT-LLM the serving environment has: the tensorrt_llm distribution of this interpreter, else of the
    interpreter that runs the trtllm-build / trtllm-serve on PATH (their script's #! line: in the image that is the
    system python, not the pipeline's venv). None: TensorRT-LLM is not installed here."""
    import shutil
    import subprocess
    from importlib import metadata

    for name in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    for tool in ("trtllm-build", "trtllm-serve"):
        script = shutil.which(tool)
        try:
            first = Path(script).read_bytes()[:256].split(b"\n")[0].decode() if script else ""
        except OSError:
            continue
        if not first.startswith("#!"):
            continue
        probe = "import importlib.metadata as m; print(m.version('tensorrt_llm'))"
        try:
            done = subprocess.run([*first[2:].split(), "-c", probe], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    return None


def check_engine_compatible(
    engine_dir: Path, gpu_key: str | None = None, trtllm_version: str | None = None
) -> BuildProfile | None:
    """Refuse an engine this environment cannot run; return its recorded profile (None if unrecorded).

    gpu_key: the GPU here (a table key or alias; "cpu" for none); None skips the GPU check.
    trtllm_version: the TensorRT-LLM here; None means the one installed (installed_trtllm_version), or, where none is
    installed (rendering on a CI machine), the pinned image's TRTLLM_VERSION: the image the repository is served in.
    A reference-runtime engine runs anywhere. A TensorRT engine is refused on the CPU, on a GPU of another
    compute capability (TensorRT engines are built per architecture), and when the version that built it (its
    config.json, engine_built_version) differs from the one here (engines only load under the version that built them).
    """
    from pipeline.core.deployable import is_pytorch_deployable
    from pipeline.core.gpus import get_gpu

    if is_pytorch_deployable(Path(engine_dir)):
        return _check_deployable_compatible(Path(engine_dir), gpu_key)
    config = _engine_config(engine_dir)
    profile = engine_profile(engine_dir)
    runtime = config.get("runtime") or (profile.runtime if profile else "tensorrtllm")
    if runtime == "reference":
        return profile
    built_version = engine_built_version(engine_dir)
    here_version = trtllm_version or installed_trtllm_version()
    where = "this environment has"
    if here_version is None:
        from pipeline.core.versions import TRITON_IMAGE

        here_version, where = TRTLLM_VERSION, f"no TensorRT-LLM is installed here, and the pinned image {TRITON_IMAGE} has"
    if built_version and built_version != here_version:
        raise UnsupportedError(
            f"The engine in {engine_dir} was built with TensorRT-LLM {built_version} (its config.json); {where} "
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
    from pipeline.core.gpus import check_pytorch_precision, get_gpu
    from pipeline.core.quant import kv_cache_format, quant_format

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
    check_pytorch_precision(here, quant_format(profile.quant), kv_cache_format(profile.kv_cache))
    return profile

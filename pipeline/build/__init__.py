"""The build stage: a TensorRT-LLM engine (trtllm-build) for a GPU, or the reference runtime's engine
folder for the CPU, at build/<model>/engines/<profile-id>/ with a manifest. `--backend pytorch`
(pipeline/build/pytorch.py) writes a PyTorch-backend deployable there instead: no engine.

Input: a TensorRT-LLM checkpoint (`pipeline convert`) for GPUs; for `--gpu cpu` the HF folder
(`pipeline download`) or a TensorRT-LLM checkpoint whose HF source is known (its manifest, or
build/<model>/hf beside it) -- the reference runtime serves the HF weights as they are.
A GPU plan (`--dry-run`) may also start from an HF folder or a bare config.json with `--quant`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from pipeline.core.artifacts import atomic_dir, build_manifest, sha256_json, write_json_atomic
from pipeline.build.checkpoint import CheckpointInfo, find_checkpoint, read_checkpoint
from pipeline.build.flags import Flag, check_buildable, command_line, trtllm_build_command, trtllm_flags
from pipeline.build.lora_build import engine_shape, lora_flags, lora_manifest, plan_lora, reference_lora_config, write_lora_dir
from pipeline.build.memory import EngineTarget, default_limits
from pipeline.build.shared import PlannedProfile, build_origin, cached, check_fits, model_folder_name
from pipeline.build.slo import slo_identity, slo_limits
from pipeline.build.runner import run_logged
from pipeline.build.draft import EnginePlanInputs, build_draft_engine, plan_speculation
from pipeline.build.speculative import SpeculativeSpec, decide
from pipeline.core.deployable import DEFAULT_BACKEND, PYTORCH_BACKEND, Backend
from pipeline.core.errors import InvalidInputError, StageFailedError, ToolMissingError
from pipeline.core.gpus import GpuSpec, check_one_cpu_process, get_gpu
from pipeline.core.paths import stage_dir
from pipeline.planner import Goal, check_tp
from pipeline.planner.stages import check_pp
from pipeline.planner.shapes import check_attention_dp_backend
from pipeline.build.profiles import BuildProfile, check_engine_compatible, engine_built_version
from pipeline.core.quant import kv_cache_format, quant_format
from pipeline.core.reporting import SILENT, Reporter
from pipeline.core.tool_env import nvidia_environment
from pipeline.core.versions import TENSORRT_VERSION, TRITON_IMAGE, TRTLLM_VERSION

if TYPE_CHECKING:  # imported where used: pipeline.build.pytorch builds on this package's shared parts
    from pipeline.build.pytorch import TorchPlan, TorchResult

__all__ = ["BuildSpec", "BuildPlan", "BuildResult", "PlannedProfile", "plan_build", "build_engine", "check_fits", "cached",
           "check_engine_compatible"]

BUILD_LOG = "build.log"


class BuildSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str
    checkpoint: Path | None = None
    model: str | None = None
    goal: Goal = "throughput"
    quant: str | None = None
    kv_cache: str | None = None
    tp: int | None = Field(None, ge=1)
    pp: int | None = Field(None, ge=1)
    max_input_len: int | None = Field(None, ge=1)
    max_seq_len: int | None = Field(None, ge=2)
    max_batch_size: int | None = Field(None, ge=1)
    max_num_tokens: int | None = Field(None, ge=1)
    tokens_per_block: int | None = Field(None, ge=1)
    gemm_plugin: str | None = None
    force: bool = False
    backend: Backend = DEFAULT_BACKEND
    slo: str | None = None  # `--slo`: limits chosen by the planner's SLO search (pipeline/build/slo.py)
    slo_isl: int | None = Field(None, ge=1)
    slo_osl: int | None = Field(None, ge=1)
    calibrate: tuple[Path, ...] = ()  # bench.json files the SLO search is calibrated with
    lora: tuple[str, ...] = ()  # [NAME=]PATH of each PEFT adapter (pipeline/build/lora_build.py)
    max_lora_rank: int | None = Field(None, ge=1)
    lora_target_modules: tuple[str, ...] = ()
    speculative: SpeculativeSpec | None = None
    attention_dp: bool = False  # --backend pytorch: attention data parallelism, the experts over the tp GPUs (DEP)


class BuildPlan(PlannedProfile):
    runtime: Literal["tensorrtllm", "reference"]
    checkpoint_kind: Literal["trtllm", "hf"]
    engine_dir: Path
    flags: list[Flag]
    command: list[str]
    command_line: str
    tokenizer: Path | None = None  # copied into <engine>/tokenizer/ so that render needs no --tokenizer
    speculative: dict[str, Any] | None = None  # the manifest's "speculative" record (pipeline.build.speculative)
    draft: Path | None = None  # the draft's input (HF folder for the CPU, TensorRT-LLM checkpoint for trtllm-build)
    draft_command: list[str] = []  # the draft engine's trtllm-build, into <engine>/draft

    @computed_field  # in --json too: one key for both backends (the old one stays for a release)
    @property
    def output_dir(self) -> Path:
        """Where the build writes (both backends' plans and results have one)."""
        return self.engine_dir


class BuildResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    plan: BuildPlan
    engine_dir: Path
    cached: bool
    duration_s: float
    log_path: Path | None = None
    peak_rss_mib: float | None = None

    @computed_field  # in --json too: one key for both backends (the old one stays for a release)
    @property
    def output_dir(self) -> Path:
        return self.engine_dir


def _resolve_checkpoint(spec: BuildSpec, gpu: GpuSpec) -> CheckpointInfo:
    if spec.checkpoint is not None:
        _refuse_converted_hf(Path(spec.checkpoint), gpu)
        return read_checkpoint(spec.checkpoint, model=spec.model, quant=spec.quant, kv_cache=spec.kv_cache,
                               tp=spec.tp, pp=spec.pp)
    if not spec.model:
        raise InvalidInputError("Nothing to build from: give --checkpoint DIR or --model NAME.",
                                hint="e.g. `pipeline build --model demo --gpu cpu` or "
                                "`pipeline build --checkpoint build/<model>/checkpoints/<id> --gpu h100`.")
    model = model_folder_name(spec.model)
    if gpu.is_cpu:
        return read_checkpoint(stage_dir(model, "hf"), model=model)
    folder = find_checkpoint(model, quant=spec.quant or "fp16", kv_cache=spec.kv_cache, tp=spec.tp or 1, pp=spec.pp or 1)
    return read_checkpoint(folder, model=model)


def _refuse_converted_hf(path: Path, gpu: GpuSpec) -> None:
    """The engine path takes TensorRT-LLM checkpoints (and, for the reference runtime or a plan, the
    HF folder `pipeline download` wrote); an HF checkpoint from `convert --format hf` is the PyTorch
    backend's input."""
    from pipeline.build.checkpoint import is_converted_hf

    if is_converted_hf(path):
        raise InvalidInputError(
            f"{path} is an HF checkpoint from `pipeline convert --format hf`: it is the PyTorch backend's input, and "
            "trtllm-build needs a TensorRT-LLM checkpoint.",
            hint=f"Build the PyTorch-backend deployable: `pipeline build --backend pytorch --checkpoint {path} --gpu {gpu.key}`; "
            "or convert for an engine with `pipeline convert --format trtllm ...` and build from that.",
        )


def _reference_input(ckpt: CheckpointInfo, spec: BuildSpec) -> tuple[CheckpointInfo, list[str]]:
    """The reference runtime serves HF weights; a quantized precision (from --quant or the converted
    checkpoint) is simulated with ModelOpt fake quantization when the server loads the model."""
    notes: list[str] = []
    check_one_cpu_process(spec.tp or 1, spec.pp or 1)
    quant = quant_format(spec.quant or ckpt.quant).name
    kv = kv_cache_format(spec.kv_cache or ckpt.kv_cache).name
    if ckpt.kind == "trtllm":
        if ckpt.hf_dir is None:
            raise InvalidInputError(
                f"The TensorRT-LLM checkpoint {ckpt.path} does not say which HF folder it came from.",
                hint="Pass the HF folder instead: --checkpoint build/<model>/hf.",
            )
        notes.append(f"reference runtime: serving the HF source {ckpt.hf_dir}")
    if quant_format(quant).is_quantized or kv != "auto":
        notes.append(f"reference runtime: {quant} (KV {kv}) is simulated with ModelOpt fake quantization, "
                     "calibrated when the server loads the model")
    shape_source = read_checkpoint(ckpt.hf_dir or ckpt.path, model=ckpt.model)
    if not any(shape_source.path.glob("*.safetensors")) and not any(shape_source.path.glob("*.bin")):
        raise InvalidInputError(f"{shape_source.path} holds no weights (*.safetensors or *.bin).",
                                hint="Run `pipeline download` for the model first.")
    return shape_source.model_copy(update={"model": ckpt.model, "quant": quant, "kv_cache": kv, "tp": 1, "pp": 1}), notes


def plan_build(spec: BuildSpec) -> BuildPlan | TorchPlan:
    """Everything about a build, decided before any work: refuses what the GPU cannot run or hold.
    `--backend pytorch` plans a deployable instead (pipeline.build.pytorch.TorchPlan)."""
    if spec.backend == PYTORCH_BACKEND:
        from pipeline.build.pytorch import plan_pytorch

        return plan_pytorch(spec)
    if spec.attention_dp:
        check_attention_dp_backend(spec.backend)
    gpu = get_gpu(spec.gpu)
    if spec.speculative is not None:  # refused before any file is read
        decide(spec.speculative, backend=spec.backend, pp=spec.pp or 1, cpu=gpu.is_cpu)
    ckpt = _resolve_checkpoint(spec, gpu)
    notes: list[str] = []
    if gpu.is_cpu:
        ckpt, notes = _reference_input(ckpt, spec)
    elif ckpt.kind == "hf":
        notes.append(f"{ckpt.path} is a Hugging Face folder: trtllm-build needs a converted checkpoint; run "
                     f"`pipeline convert --model {ckpt.model} --quant {ckpt.quant}"
                     f"{'' if ckpt.kv_cache == 'auto' else ' --kv-cache ' + ckpt.kv_cache} --tp {ckpt.tp} --pp {ckpt.pp}` "
                     "and build from build/<model>/checkpoints/<id>")
    quant, kv = quant_format(ckpt.quant), kv_cache_format(ckpt.kv_cache)
    if not gpu.is_cpu:
        check_buildable(gpu, quant, kv)
    check_tp(ckpt.shape, ckpt.tp)
    check_pp(ckpt.shape, ckpt.pp)
    lora = plan_lora(list(spec.lora), engine_shape(ckpt, gpu.is_cpu), spec.max_lora_rank, list(spec.lora_target_modules))
    target = EngineTarget(ckpt.shape, gpu, quant, kv, ckpt.tp, ckpt.pp, spec.goal)
    slo_plan, given = slo_limits(ckpt.hf_dir or ckpt.path, target, spec)  # pipeline/build/slo.py
    limits = default_limits(target, **given)
    if gpu.is_cpu:
        flags: list[Flag] = []
    else:
        flags = trtllm_flags(target, limits, tokens_per_block=spec.tokens_per_block, gemm_plugin=spec.gemm_plugin)
        flags += lora_flags(lora) if lora else []
    memory, fit_notes = check_fits(ckpt.model, target, limits, lora.cache_bytes if lora else 0)
    notes.extend(fit_notes)
    speculated = None
    if spec.speculative is not None:
        speculated = plan_speculation(spec.speculative, EnginePlanInputs(
            name=ckpt.model, checkpoint=ckpt.hf_dir if gpu.is_cpu and ckpt.hf_dir else ckpt.path, target=target,
            limits=limits, flags=flags, memory=memory, tokens_per_block=spec.tokens_per_block, gemm_plugin=spec.gemm_plugin))
        flags, memory = speculated.flags, speculated.memory
        notes.extend(speculated.notes)
    profile = BuildProfile(
        model=ckpt.model, model_revision=ckpt.revision, runtime=gpu.runtime, gpu=gpu.key,
        compute_capability=gpu.compute_capability, quant=quant.name, kv_cache=kv.name, tp=ckpt.tp, pp=ckpt.pp,
        goal=spec.goal, max_input_len=limits.max_input_len, max_seq_len=limits.max_seq_len,
        max_batch_size=limits.max_batch_size, max_num_tokens=limits.max_num_tokens,
        lora=sha256_json(lora.identity())[:12] if lora else None,
        speculative=speculated.label if speculated else None,
    )
    engine_dir = stage_dir(ckpt.model, "engines", profile.id)
    block = spec.tokens_per_block or 32
    tokenizer = _tokenizer_source(ckpt)
    if tokenizer is None and not gpu.is_cpu and ckpt.kind == "trtllm":
        notes.append(f"no tokenizer: {ckpt.path} does not say which HF folder it came from, so the engine folder "
                     "will have no tokenizer/ and `pipeline render` will need --tokenizer DIR")
    # an HF folder can only be planned: the command names where `pipeline convert` will write
    source = ckpt.path if ckpt.kind == "trtllm" else stage_dir(ckpt.model, "checkpoints") / "<checkpoint-id>"
    command = [] if gpu.is_cpu else trtllm_build_command(source, engine_dir, flags)
    inputs_hash = sha256_json({
        "profile": profile.identity(),
        "checkpoint": {"kind": ckpt.kind, "revision": ckpt.revision},
        "flags": [f.argv() for f in flags],
        "tokens_per_block": block if gpu.is_cpu else None,
        "tokenizer": bool(tokenizer),
        **slo_identity(slo_plan),
        **({"lora": lora.identity()} if lora else {}),
        **({"speculative": speculated.identity()} if speculated else {}),
    })
    return BuildPlan(
        profile=profile, profile_id=profile.id, profile_name=profile.name, runtime=gpu.runtime,
        gpu=gpu.summary(),
        checkpoint=ckpt.hf_dir if gpu.is_cpu and ckpt.hf_dir else ckpt.path, checkpoint_kind=ckpt.kind,
        engine_dir=engine_dir, limits=limits, flags=flags, command=command,
        command_line=command_line(command) if command else "", memory=memory, inputs_hash=inputs_hash, notes=notes,
        tokenizer=tokenizer, slo_plan=slo_plan, lora=lora, speculative=speculated.record if speculated else None,
        draft=speculated.draft_checkpoint if speculated else None,
        draft_command=speculated.command(engine_dir) if speculated and not gpu.is_cpu else [],
    )


def _tokenizer_source(ckpt: CheckpointInfo) -> Path | None:
    """The HF folder whose tokenizer files the engine folder keeps (None when none is known)."""
    from pipeline.hf.tokenizer import tokenizer_files

    return ckpt.hf_dir if ckpt.hf_dir is not None and tokenizer_files(ckpt.hf_dir) else None


def copy_tokenizer(source: Path, engine_dir: Path) -> None:
    """<engine>/tokenizer/: the tokenizer files of the HF source, hard-linked where possible."""
    from pipeline.core.artifacts import link_or_copy
    from pipeline.hf.tokenizer import tokenizer_files

    target = engine_dir / "tokenizer"
    target.mkdir(parents=True, exist_ok=True)
    for path in tokenizer_files(source):
        link_or_copy(path, target / path.name)


def _manifest_extra(plan: BuildPlan, timings: dict[str, float], peak_rss_mib: float | None,
                    built_with: str | None = None) -> dict[str, Any]:
    """built_with: the TensorRT-LLM version trtllm-build wrote into the engine's config.json (None: no engine)."""
    return {
        "profile": plan.profile.model_dump(mode="json"),
        "profile_id": plan.profile_id,
        "profile_name": plan.profile_name,
        "runtime": plan.runtime,
        "gpu": plan.gpu,
        "versions": {"trtllm": TRTLLM_VERSION, "tensorrt": TENSORRT_VERSION, "triton_image": TRITON_IMAGE,
                     "trtllm_engine": built_with},
        "checkpoint": {"path": str(plan.checkpoint), "kind": plan.checkpoint_kind, "revision": plan.profile.model_revision},
        "tokenizer": str(plan.tokenizer) if plan.tokenizer else None,
        "limits": plan.limits.model_dump(),
        "flags": [f.model_dump() for f in plan.flags],
        "command": plan.command,
        **({"speculative": plan.speculative, "draft": {"source": str(plan.draft) if plan.draft else None,
                                                       "command": plan.draft_command}} if plan.speculative else {}),
        "memory_estimate": plan.memory.model_dump(),
        "timings": timings,
        "peak_rss_mib": peak_rss_mib,
        **({"slo_plan": plan.slo_plan} if plan.slo_plan else {}),
        **({"lora": lora_manifest(plan.lora, plan.memory)} if plan.lora else {}),
    }


def _build_reference(plan: BuildPlan, spec: BuildSpec, started: float) -> BuildResult:
    from pipeline.build.reference_folder import write_reference_engine_dir

    limits = plan.limits
    build_config = {
        **limits.model_dump(),
        "max_beam_width": 1,
        "plugin_config": {"paged_kv_cache": True, "tokens_per_block": spec.tokens_per_block or 32,
                          "remove_input_padding": True, "context_fmha": True, "use_paged_context_fmha": True},
    }
    if plan.lora:
        lora_keys = reference_lora_config(plan.lora)
        build_config["lora_config"] = lora_keys["lora_config"]
        build_config["plugin_config"]["lora_plugin"] = lora_keys["lora_plugin"]
    with atomic_dir(plan.engine_dir) as tmp:
        simulated = (plan.profile.quant, plan.profile.kv_cache)
        if plan.draft is not None:  # the draft's own complete reference folder at <build>/draft
            write_reference_engine_dir(plan.draft, tmp / "draft", build_config, simulated_quant=simulated)
        spec_config = {"speculative": plan.speculative} if plan.speculative else {}
        write_reference_engine_dir(plan.checkpoint, tmp, {**build_config, **spec_config}, simulated_quant=simulated)
        write_lora_dir(plan.lora, tmp)
        timings = {"build_s": round(time.time() - started, 3)}
        manifest = build_manifest(build_origin(plan), tmp, started, extra=_manifest_extra(plan, timings, None))
        write_json_atomic(tmp / "manifest.json", manifest)
    return BuildResult(plan=plan, engine_dir=plan.engine_dir, cached=False, duration_s=round(time.time() - started, 3))


def _build_trtllm(plan: BuildPlan, started: float, reporter: Reporter) -> BuildResult:
    if plan.checkpoint_kind != "trtllm":
        raise InvalidInputError(f"trtllm-build needs a TensorRT-LLM checkpoint; {plan.checkpoint} is a Hugging Face folder.",
                                hint=plan.notes[0] if plan.notes else "Run `pipeline convert` first.")
    executable = shutil.which("trtllm-build")
    if executable is None:
        raise ToolMissingError(
            f"trtllm-build is not installed here, so the {plan.profile_name} engine cannot be built on this machine.",
            hint=f"It runs in the pinned image {TRITON_IMAGE} (TensorRT-LLM {TRTLLM_VERSION}) on a {plan.gpu['key']} "
            "GPU: `make image`, then `make engine GPU=... MODEL=... QUANT=...` inside it. "
            "Add --dry-run to see the exact command and memory estimate now.",
        )
    log_path = plan.engine_dir.parent / f".{plan.profile_id}.{BUILD_LOG}"
    log_path.unlink(missing_ok=True)
    world = plan.profile.world_size
    with atomic_dir(plan.engine_dir) as tmp:
        argv = trtllm_build_command(plan.checkpoint, tmp, plan.flags, executable)
        with reporter.progress() as progress:
            task = progress.start(f"trtllm-build {plan.profile_name}", total=None)

            def show(line: str) -> None:
                if line.strip():
                    progress.advance(task, 0, description=f"trtllm-build: {line.strip()[:70]}")

            # NVIDIA's tool: the image's python3 and TensorRT-LLM's packages, not the pipeline's venv
            result = run_logged(argv, log_path, env=nvidia_environment(), on_line=show)
            progress.finish(task)
        if result.returncode != 0:
            raise StageFailedError(
                f"trtllm-build exited with code {result.returncode} after {result.duration_s:.0f} s "
                f"(peak memory {result.peak_rss_mib:.0f} MiB). Last lines of {log_path}:\n{result.log_tail(25)}",
                hint="Fix the cause shown in the log (often out of memory: lower --max-num-tokens / --max-batch-size, "
                "or a larger --tp) and run again.",
            )
        missing = [name for name in ["config.json", *(f"rank{r}.engine" for r in range(world))] if not (tmp / name).is_file()]
        if missing:
            raise StageFailedError(f"trtllm-build exited 0 but wrote no {', '.join(missing)} (log: {log_path}).",
                                   hint="Check the log; the TensorRT-LLM version in this environment may differ from "
                                   f"the pinned {TRTLLM_VERSION}.")
        shutil.move(str(log_path), tmp / BUILD_LOG)
        if plan.draft_command:
            build_draft_engine(plan, tmp, executable)
        if plan.tokenizer is not None:
            copy_tokenizer(plan.tokenizer, tmp)
        write_lora_dir(plan.lora, tmp)
        timings = {"trtllm_build_s": result.duration_s, "total_s": round(time.time() - started, 3)}
        extra = _manifest_extra(plan, timings, result.peak_rss_mib, engine_built_version(tmp))
        manifest = build_manifest(build_origin(plan), tmp, started, extra=extra)
        write_json_atomic(tmp / "manifest.json", manifest)
    return BuildResult(plan=plan, engine_dir=plan.engine_dir, cached=False, duration_s=round(time.time() - started, 3),
                       log_path=plan.engine_dir / BUILD_LOG, peak_rss_mib=result.peak_rss_mib)


def build_engine(spec: BuildSpec, reporter: Reporter = SILENT) -> BuildResult | TorchResult:
    """Build (or find already built) the engine the spec describes, or with `--backend pytorch` the
    deployable (pipeline.build.pytorch.TorchResult); progress goes to reporter (silent by default)."""
    if spec.backend == PYTORCH_BACKEND:
        from pipeline.build.pytorch import build_pytorch

        return build_pytorch(spec, reporter)
    started = time.time()
    plan = plan_build(spec)
    if not spec.force and cached(plan.engine_dir, plan.inputs_hash):
        return BuildResult(plan=plan, engine_dir=plan.engine_dir, cached=True, duration_s=round(time.time() - started, 3))
    if plan.runtime == "reference":
        return _build_reference(plan, spec, started)
    return _build_trtllm(plan, started, reporter)

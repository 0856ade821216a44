"""`pipeline build --backend pytorch`: a TensorRT-LLM PyTorch-backend deployable. No engine is built
(TensorRT-LLM's LLM API loads the HF checkpoint and shards it at load time); the stage decides the
LLM-API options and lays out build/<model>/engines/<profile-id>/:

    model/                 hard links of the HF checkpoint's files (weights, configs, tokenizer)
    llm_api_options.yaml   the options `trtllm-serve --extra_llm_api_options` reads (TorchLlmArgs keys
                           of TensorRT-LLM 1.1.0, every key checked against pipeline/data/trtllm_llm_args.tsv)
    manifest.json          stage "build", backend "pytorch", the profile, the options, the checkpoint

The options come from the same planner as the engine path's trtllm-build flags (default_limits ->
planner.recommend_build, memory.estimate), per GPU and goal:

- max_batch_size, max_num_tokens, max_seq_len: the engine's limits (with --slo, and the KV fraction below: the SLO
  search's choice for the PyTorch backend, pipeline/build/slo.py). In the PyTorch backend they mean the
  same (requests scheduled per iteration, tokens per iteration, prompt + output per request) but are
  runtime caps, not compiled shapes: nothing is rebuilt to change them, and without chunked prefill a
  prompt longer than max_num_tokens cannot be scheduled, so enable_chunked_prefill is set when
  max_num_tokens < max_input_len. max_batch_size also bounds the CUDA graphs below.
- kv_cache_config.free_gpu_memory_fraction: 0.90, the fraction of the memory free after the weights and
  the warm-up that goes to the KV cache (TensorRT-LLM's documented default). The engine path's
  throughput goal gives the KV cache 0.95; here the CUDA graphs (up to ~200 MB each, per the field's
  own description) are captured from the rest, so the default's headroom is kept.
- kv_cache_config.dtype: "fp8" for a checkpoint with an FP8 KV cache (ModelOpt's kv_cache_quant_algo),
  else "auto" (the model's dtype); enable_block_reuse: true (prefix reuse; the default, stated).
- tensor_parallel_size: --tp (the LLM API shards the checkpoint at load time). With --attention-dp (MoE models):
  enable_attention_dp and moe_expert_parallel_size; with --pp, pipeline_parallel_size (pipeline/build/parallel.py).
- dtype: "float16"/"bfloat16" only for a float32 checkpoint (the demo's GGUF-derived hf/): the LLM API
  casts at load, so the deployable runs the profile's 16-bit precision; otherwise left to "auto".
- cuda_graph_config: batch_sizes = powers of two up to max_batch_size, plus max_batch_size; enable_padding true so a
  batch between two sizes runs the next graph up (1.1.0's validator sets its max_batch_size to max(batch_sizes)). Null
  on the CPU, and with --lora (lora_config and the adapters in lora/: pipeline/build/lora_options.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field

from pipeline.core.artifacts import atomic_dir, build_manifest, link_or_copy, sha256_json, write_json_atomic, write_text_atomic
from pipeline.build.shared import PlannedProfile, build_origin, cached, check_fits, model_folder_name
from pipeline.build.checkpoint import (CheckpointInfo, checkpoint_format, find_hf_checkpoint, hf_source_of, read_checkpoint,
                                       read_source)
from pipeline.build.llm_args import check_options, source_commit
from pipeline.build.lora_build import plan_lora
from pipeline.build.lora_options import copy_adapters, lora_extra, with_lora
from pipeline.build.slo import slo_identity, slo_limits, with_slo_options
from pipeline.build.memory import EngineTarget, Limits, default_limits
from pipeline.core.deployable import (HF_CHECKPOINT_PREFIX, HF_FORMAT, HF_KV_CACHE_FORMATS, HF_QUANT_FORMATS, MODEL_SUBDIR, OPTIONS_FILE,
                                      PYTORCH_BACKEND)
from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import GpuSpec, check_pytorch_precision, get_gpu
from pipeline.core.paths import stage_dir
from pipeline.planner import DEFAULT_KV_FRACTION, Goal
from pipeline.build.parallel import check_split, with_split
from pipeline.build.profiles import BuildProfile
from pipeline.core.quant import kv_cache_format, quant_format
from pipeline.core.reporting import SILENT, Reporter
from pipeline.core.versions import TRTLLM_VERSION

MODEL_FILE_SUFFIXES = (".safetensors", ".json", ".jinja", ".model", ".txt", ".py")
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer.model")


class TorchPlan(PlannedProfile):
    """Everything about a PyTorch-backend deployable, decided before any file is written."""

    runtime: Literal["pytorch", "reference"]
    checkpoint_format: str
    model_source: Path  # the folder whose files model/ links (the checkpoint, or its 16-bit source on the CPU)
    deploy_dir: Path
    options: dict[str, Any]
    why: dict[str, str]
    simulated: dict[str, str] | None = None
    env: dict[str, str] = {}  # environment the serving process needs (server_env), recorded in the manifest
    plan_only: str = ""  # non-empty: the input can be planned but not built (what to run first)
    speculative: dict[str, Any] | None = None  # the manifest's "speculative" record
    draft_source: Path | None = None  # the HF folder <deployable>/draft/ links

    @computed_field  # in --json too: one key for both backends (the old one stays for a release)
    @property
    def output_dir(self) -> Path:
        return self.deploy_dir


class TorchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    plan: TorchPlan
    deploy_dir: Path
    cached: bool
    duration_s: float

    @computed_field  # in --json too: one key for both backends (the old one stays for a release)
    @property
    def output_dir(self) -> Path:
        return self.deploy_dir


def cuda_graph_batch_sizes(max_batch_size: int) -> list[int]:
    """Powers of two up to max_batch_size, plus max_batch_size itself."""
    sizes = [1 << i for i in range(max_batch_size.bit_length()) if 1 << i <= max_batch_size]
    return sizes if sizes[-1] == max_batch_size else [*sizes, max_batch_size]


def llm_api_options(gpu: GpuSpec, kv: str, tp: int, goal: Goal, limits: Limits,
                    cast_to: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The LLM-API options and the reason for each (see the module docstring). cast_to: the 16-bit
    dtype to load float32 weights in (the profile's fp16/bf16), None to keep the checkpoint's dtype."""
    options: dict[str, Any] = {
        "backend": PYTORCH_BACKEND,
        "tensor_parallel_size": tp,
        "max_batch_size": limits.max_batch_size,
        "max_num_tokens": limits.max_num_tokens,
        "max_seq_len": limits.max_seq_len,
        "kv_cache_config": {
            "free_gpu_memory_fraction": DEFAULT_KV_FRACTION,
            "dtype": "fp8" if kv == "fp8" else "auto",
            "enable_block_reuse": True,
        },
        "cuda_graph_config": None if gpu.is_cpu else {
            "batch_sizes": cuda_graph_batch_sizes(limits.max_batch_size),
            "enable_padding": True,
        },
    }
    why = {
        "backend": "the LLM API's PyTorch backend (TorchLlmArgs)",
        "tensor_parallel_size": "the LLM API shards the HF checkpoint over this many GPUs at load time",
        "max_batch_size": f"{goal} goal: requests scheduled per iteration (the planner's engine limit)",
        "max_num_tokens": f"{goal} goal: tokens per iteration, prefill and decode together",
        "max_seq_len": "prompt + generated tokens per request",
        "kv_cache_config.free_gpu_memory_fraction": "share of the memory left after weights and warm-up; the "
        "documented default, leaving room for the CUDA graphs",
        "kv_cache_config.dtype": (f"FP8 KV cache with the checkpoint's calibrated scales: TensorRT-LLM 1.1 loads them only "
                                  f"with {LOAD_KV_SCALES}=1 in the server's environment (the manifest's env)")
        if kv == "fp8" and not gpu.is_cpu else "FP8 KV cache, simulated" if kv == "fp8" else "the model's dtype",
        "kv_cache_config.enable_block_reuse": "reuse the KV blocks of shared prefixes (chat templates, system prompts)",
        "cuda_graph_config": "no CUDA graphs on the CPU" if gpu.is_cpu else
        "decode steps replay CUDA graphs captured for these batch sizes; padding rounds a batch up to the next one",
    }
    if cast_to and not gpu.is_cpu:
        options["dtype"] = cast_to
        why["dtype"] = f"the checkpoint's weights are float32: the LLM API loads them as {cast_to}, the profile's precision"
    if limits.max_num_tokens < limits.max_input_len:
        options["enable_chunked_prefill"] = True
        why["enable_chunked_prefill"] = (f"max_num_tokens {limits.max_num_tokens} < max_input_len {limits.max_input_len}: "
                                         "long prompts are prefilled in chunks")
    check_options(options)
    return options, why


# TensorRT-LLM 1.1's PyTorch backend copies a checkpoint's calibrated k_scale / v_scale into the attention's KV scales
# only when TRTLLM_LOAD_KV_SCALES=1 (tensorrt_llm/_torch/modules/linear.py, FP8QDQLinearMethod fused-QKV loading; off
# by default in the 1.1-era file @ed53795b: pipeline/data/trtllm_pytorch_checkpoint.json, quant_configs.fp8.note).
LOAD_KV_SCALES = "TRTLLM_LOAD_KV_SCALES"


def server_env(gpu: GpuSpec, kv: str) -> dict[str, str]:
    """The environment variables the process that loads the deployable needs: TRTLLM_LOAD_KV_SCALES=1 for an FP8 KV
    cache on a GPU, so that the scales ModelOpt calibrated are the ones used (the CPU runtime simulates its own)."""
    return {LOAD_KV_SCALES: "1"} if kv == "fp8" and not gpu.is_cpu else {}


def options_yaml(plan: TorchPlan) -> str:
    import yaml

    head = (f"# LLM-API options for TensorRT-LLM {TRTLLM_VERSION}'s PyTorch backend, written by `pipeline build` for "
            f"{plan.profile_name} ({plan.profile_id}).\n"
            f"# Keys checked against TorchLlmArgs @{source_commit()} (pipeline/data/trtllm_llm_args.tsv).\n"
            f"# {''.join(f'{k}={v} ' for k, v in plan.env.items())}trtllm-serve <model/> --extra_llm_api_options {OPTIONS_FILE}\n")
    return head + yaml.safe_dump(plan.options, sort_keys=False)


def _hf_checkpoint(spec: Any, gpu: GpuSpec) -> CheckpointInfo:
    """The HF checkpoint the deployable is made of (refusing a TensorRT-LLM one), with its precision."""
    if spec.checkpoint is not None:
        path = Path(spec.checkpoint)
    elif spec.model:
        path = find_hf_checkpoint(model_folder_name(spec.model), spec.quant, spec.kv_cache)
    else:
        raise InvalidInputError("Nothing to build from: give --checkpoint DIR or --model NAME.",
                                hint="e.g. `pipeline build --backend pytorch --checkpoint build/<model>/checkpoints/hf-<id> "
                                "--gpu h100`.")
    if checkpoint_format(path) != HF_FORMAT:
        info = read_checkpoint(path, model=spec.model)
        raise InvalidInputError(
            f"{info.path} is a TensorRT-LLM checkpoint; the PyTorch backend loads an HF checkpoint.",
            hint=f"Convert one: `pipeline convert --model {info.model} --quant {info.quant}"
            f"{'' if info.kv_cache == 'auto' else ' --kv-cache ' + info.kv_cache} --format hf`, then "
            f"`pipeline build --backend pytorch --checkpoint build/{info.model}/checkpoints/{HF_CHECKPOINT_PREFIX}<id> "
            f"--gpu {gpu.key}`; or build an engine from this one: `pipeline build --checkpoint {info.path} --gpu {gpu.key}`.",
        )
    return read_source(path, model=spec.model)


def _precision(spec: Any, ckpt: CheckpointInfo, gpu: GpuSpec) -> tuple[str, str, str, dict[str, str] | None]:
    """(quant, kv, plan_only, simulated): what the deployable runs. On a GPU the checkpoint's own
    precision (an asked one it does not hold can only be planned); on the CPU a quantized precision is
    simulated by the reference runtime over 16-bit weights."""
    quant = quant_format(spec.quant).name if spec.quant else ckpt.quant
    kv = kv_cache_format(spec.kv_cache).name if spec.kv_cache else ckpt.kv_cache
    if quant not in HF_QUANT_FORMATS or kv not in HF_KV_CACHE_FORMATS:
        raise InvalidInputError(
            f"The PyTorch-backend path takes weights {', '.join(HF_QUANT_FORMATS)} and KV cache "
            f"{' or '.join(HF_KV_CACHE_FORMATS)}; asked: {quant}, KV {kv}.",
            hint=f"Use one of those, or the engine path for {quant}: `pipeline convert --quant {quant}` then `pipeline build`.",
        )
    plan_only = ""
    if (quant, kv) != (ckpt.quant, ckpt.kv_cache) and not gpu.is_cpu:
        plan_only = (f"{ckpt.path} holds {ckpt.quant} (KV {ckpt.kv_cache}); run `pipeline convert --model {ckpt.model} "
                     f"--quant {quant}{'' if kv == 'auto' else ' --kv-cache ' + kv} --format hf` and build from "
                     f"build/{ckpt.model}/checkpoints/{HF_CHECKPOINT_PREFIX}<id>")
    simulated = None
    if gpu.is_cpu and (quant_format(quant).is_quantized or kv != "auto"):
        simulated = {"quant": quant, "kv_cache": kv}
    return quant, kv, plan_only, simulated


def _model_source(ckpt: CheckpointInfo, gpu: GpuSpec, simulated: dict[str, str] | None) -> tuple[Path, list[str]]:
    """The folder model/ links: the checkpoint itself, except on the CPU for a quantized checkpoint:
    transformers cannot load ModelOpt's quantized safetensors there, so the reference runtime gets the
    16-bit source it was converted from and simulates the precision (as `pipeline build --gpu cpu` does)."""
    if not gpu.is_cpu or not quant_format(ckpt.quant).is_quantized:
        notes = [f"reference runtime: {simulated['quant']} (KV {simulated['kv_cache']}) is simulated with ModelOpt fake "
                 "quantization when it loads model/"] if simulated else []
        return ckpt.path, notes
    source = hf_source_of(ckpt.path)
    if source is None or checkpoint_format(source) != HF_FORMAT or read_source(source).quant not in ("fp16", "bf16"):
        raise InvalidInputError(
            f"{ckpt.path} holds ModelOpt {ckpt.quant} weights, which transformers cannot load on the CPU, and its "
            "manifest does not name the 16-bit HF folder it was converted from.",
            hint=f"Build from the 16-bit folder with the precision to simulate: `pipeline build --backend pytorch "
            f"--gpu cpu --checkpoint build/{ckpt.model}/hf --quant {ckpt.quant}"
            f"{'' if ckpt.kv_cache == 'auto' else ' --kv-cache ' + ckpt.kv_cache}`.",
        )
    return source, [f"reference runtime: model/ holds the 16-bit source {source} (transformers cannot load ModelOpt's "
                    f"{ckpt.quant} safetensors on the CPU); {ckpt.quant} (KV {ckpt.kv_cache}) is simulated with ModelOpt "
                    "fake quantization when it loads model/"]


def model_files(folder: Path) -> list[Path]:
    """The checkpoint files model/ links: weights, configs, tokenizer, chat template (not the manifest)."""
    return sorted(p for p in Path(folder).iterdir()
                  if p.is_file() and p.name.endswith(MODEL_FILE_SUFFIXES) and p.name != "manifest.json")


def _model_source_problem(folder: Path) -> str:
    """What model/ would lack from this folder ("" = nothing): weights, or the tokenizer the LLM API and
    transformers both load from the model folder."""
    names = {p.name for p in model_files(folder)}
    if not any(n.endswith(".safetensors") for n in names):
        return f"{folder} holds no *.safetensors weights (convert with `pipeline convert --format hf`, or download the model)"
    if not names & set(TOKENIZER_MARKERS):
        return (f"{folder} has no tokenizer (tokenizer.json or tokenizer.model); `pipeline convert --format hf` copies it "
                "into the checkpoint")
    return ""


def plan_pytorch(spec: Any) -> TorchPlan:
    """Everything about the deployable, decided before any work: refuses what the GPU cannot run or hold."""
    if spec.tokens_per_block is not None or spec.gemm_plugin is not None:
        raise InvalidInputError("--tokens-per-block and --gemm-plugin are trtllm-build flags; --backend pytorch builds no engine.",
                                hint="Drop them (the PyTorch backend's KV block size stays at its default).")
    gpu = get_gpu(spec.gpu)
    ckpt = _hf_checkpoint(spec, gpu)
    quant, kv, plan_only, simulated = _precision(spec, ckpt, gpu)
    if not gpu.is_cpu:
        check_pytorch_precision(gpu, quant_format(quant), kv_cache_format(kv))
    tp, pp = check_split(spec, ckpt.shape, gpu)
    source, notes = _model_source(ckpt, gpu, simulated)
    plan_only = "; ".join(filter(None, [plan_only, _model_source_problem(source)]))
    qf, kf = quant_format(quant), kv_cache_format(kv)
    target = EngineTarget(ckpt.shape, gpu, qf, kf, tp, pp, spec.goal, attention_dp=spec.attention_dp)
    slo_plan, given = slo_limits(ckpt.path, target, spec)  # --slo: the search's choice for the PyTorch backend
    limits = default_limits(target, **given)
    lora = plan_lora(list(spec.lora), ckpt.shape, spec.max_lora_rank, list(spec.lora_target_modules))
    memory, fit_notes = check_fits(ckpt.model, target, limits, lora.cache_bytes if lora else 0)
    cast_to = {"fp16": "float16", "bf16": "bfloat16"}.get(quant) if str(ckpt.shape.dtype) == "float32" else None
    speculated = None
    if spec.speculative is not None:  # pipeline/build/pytorch_speculative.py
        from pipeline.build.pytorch_speculative import plan_torch_speculation

        speculated = plan_torch_speculation(spec.speculative, source, target, limits, memory)
        memory, fit_notes = speculated.memory, [*fit_notes, *speculated.notes]
    env = server_env(gpu, kv)
    profile = BuildProfile(
        model=ckpt.model, model_revision=ckpt.revision, runtime=gpu.runtime, gpu=gpu.key,
        compute_capability=gpu.compute_capability, quant=quant, kv_cache=kv, tp=tp, pp=pp, goal=spec.goal,
        max_input_len=limits.max_input_len, max_seq_len=limits.max_seq_len, max_batch_size=limits.max_batch_size,
        max_num_tokens=limits.max_num_tokens, backend=PYTORCH_BACKEND, lora=sha256_json(lora.identity())[:12] if lora else None,
        speculative=speculated.label if speculated else None, attention_dp=spec.attention_dp,
    )
    deploy_dir = stage_dir(ckpt.model, "engines", profile.id)
    options, why = with_split(*with_lora(*with_slo_options(*llm_api_options(gpu, kv, tp, spec.goal, limits, cast_to), slo_plan),
                                         lora, deploy_dir), tp=tp, pp=pp, attention_dp=spec.attention_dp)
    if speculated is not None:
        options, why = speculated.options(options, deploy_dir), {**why, **speculated.why}
        check_options(options)
    inputs_hash = sha256_json({"profile": profile.model_dump(mode="json"), "checkpoint": ckpt.revision, "model_source": str(source),
                               "options": options, "simulated": simulated, "env": env, "lora": lora.identity() if lora else None,
                               **({"draft": str(speculated.draft_source)} if speculated else {}), **slo_identity(slo_plan)})
    return TorchPlan(
        profile=profile, profile_id=profile.id, profile_name=profile.name,
        runtime="reference" if gpu.is_cpu else "pytorch",
        gpu=gpu.summary(),
        checkpoint=ckpt.path, checkpoint_format=HF_FORMAT, model_source=source,
        deploy_dir=deploy_dir, limits=limits, options=options, why=why,
        memory=memory, inputs_hash=inputs_hash, simulated=simulated, env=env, notes=[*notes, *fit_notes], plan_only=plan_only, lora=lora,
        speculative=speculated.record if speculated else None, draft_source=speculated.draft_source if speculated else None,
        slo_plan=slo_plan,
    )


def build_pytorch(spec: Any, reporter: Reporter = SILENT) -> TorchResult:
    """Write (or find already written) the deployable the spec describes; linking (or, across
    filesystems, copying) the model files shows as progress on reporter (silent by default)."""
    started = time.time()
    plan = plan_pytorch(spec)
    if plan.plan_only:
        raise InvalidInputError(f"Cannot build {plan.profile_name} from this input: {plan.plan_only}.",
                                hint="Add --dry-run to see the options and memory plan now.")
    if not spec.force and cached(plan.deploy_dir, plan.inputs_hash):
        return TorchResult(plan=plan, deploy_dir=plan.deploy_dir, cached=True, duration_s=round(time.time() - started, 3))
    with atomic_dir(plan.deploy_dir) as tmp:
        model_dir = tmp / MODEL_SUBDIR
        model_dir.mkdir()
        sources = model_files(plan.model_source)
        linked = []
        with reporter.progress() as progress:
            task = progress.start(f"model/ from {plan.model_source.name}", total=len(sources))
            for path in sources:
                linked.append(link_or_copy(path, model_dir / path.name))
                progress.advance(task)
        if plan.draft_source is not None:  # the draft's files, as model/'s are
            (tmp / "draft").mkdir()
            linked.extend(link_or_copy(path, tmp / "draft" / path.name) for path in model_files(plan.draft_source))
        write_text_atomic(tmp / OPTIONS_FILE, options_yaml(plan))
        copy_adapters(plan.lora, tmp)
        manifest = build_manifest(
            build_origin(plan), tmp, started, extra={**_manifest_extra(plan, linked, started), **lora_extra(plan.lora, plan.deploy_dir)},
            files=_inventory(tmp, plan.model_source),
        )
        write_json_atomic(tmp / "manifest.json", manifest)
    return TorchResult(plan=plan, deploy_dir=plan.deploy_dir, cached=False, duration_s=round(time.time() - started, 3))


def _inventory(folder: Path, source: Path) -> dict[str, dict[str, Any]]:
    """file_inventory(folder), taking the hashes of model/'s files from the source's manifest where that
    manifest recorded the file as it still is (same size and mtime: a hard link shares both), so a
    multi-GiB checkpoint is not hashed again."""
    from pipeline.core.artifacts import MANIFEST_NAME, file_record, read_manifest

    recorded = read_manifest(source) or {}
    files, mtimes = recorded.get("files") or {}, recorded.get("mtimes_ns") or {}
    inventory: dict[str, dict[str, Any]] = {}
    for rel in sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()):
        if rel == MANIFEST_NAME:
            continue
        path, name = folder / rel, rel.removeprefix(f"{MODEL_SUBDIR}/")
        known = files.get(name) if rel.startswith(f"{MODEL_SUBDIR}/") else None
        inventory[rel] = file_record(path, known if mtimes.get(name) == path.stat().st_mtime_ns else None)
    return inventory


def _manifest_extra(plan: TorchPlan, linked: list[str], started: float) -> dict[str, Any]:
    from pipeline.core.versions import TRITON_IMAGE

    return {
        "backend": PYTORCH_BACKEND,
        "profile": plan.profile.model_dump(mode="json"),
        "profile_id": plan.profile_id,
        "profile_name": plan.profile_name,
        "runtime": plan.runtime,
        "gpu": plan.gpu,
        "versions": {"trtllm": TRTLLM_VERSION, "triton_image": TRITON_IMAGE, "llm_args_commit": source_commit()},
        "checkpoint": {"path": str(plan.checkpoint), "format": plan.checkpoint_format, "hash": plan.profile.model_revision,
                       "quant": plan.profile.quant, "kv_cache": plan.profile.kv_cache},
        "model_source": str(plan.model_source),
        "model_files_linked": linked.count("linked"),
        "model_files_copied": linked.count("copied"),
        "simulated": plan.simulated,
        "options_file": OPTIONS_FILE, "speculative": plan.speculative,
        "options": plan.options,
        "env": plan.env,
        "why": plan.why,
        "limits": plan.limits.model_dump(),
        "memory_estimate": plan.memory.model_dump(),
        "notes": plan.notes,
        "timings": {"build_s": round(time.time() - started, 3)},
        **({"slo_plan": plan.slo_plan} if plan.slo_plan else {}),
    }

"""render: an engine folder -> a Triton model repository (preprocessing, tensorrt_llm, postprocessing,
ensemble, tensorrt_llm_bls) from the Jinja templates in model_repo_templates/ (installed as the package
pipeline.model_repo_templates; $PIPELINE_TEMPLATES_DIR overrides it).

The repository is a bundle (pipeline/bundle.py): it holds the engine and the tokenizer too, and every
path in its configs starts with its model root (`--model-root`, default: the folder itself).

Values the engine fixes (max_batch_size, beam width, tokenizer) come from the engine folder's
config.json; operators choose the rest (RenderSpec). The repository is written to a temporary folder,
checked there, and renamed into place only when every check passed:

  - each config.pbtxt parses into Triton's own ModelConfig protobuf;
  - no `${`, `{{` or `{%` survives anywhere in the repository;
  - every ensemble step maps only tensors its model declares, and every tensor it reads is produced;
  - the tensorrt_llm model's tensors and parameter keys match the pinned release's reference tables
    (pipeline/data/reference/, copied from shared/reference/; $PIPELINE_REFERENCE_DIR overrides them);
    missing tables are an error, never a skipped check;
  - every path in every config lies under the model root and names a file of the bundle.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline import bundle
from pipeline.artifacts import atomic_dir, build_manifest, is_up_to_date, sha256_json, write_json_atomic
from pipeline.errors import InvalidInputError, StageFailedError
from pipeline.llmapi_repo import looks_like_deployable, render_llmapi
from pipeline.model_repo import (
    LEFTOVER_MARKERS,
    RenderResult,
    Runtime,
    default_out_dir,
    package_folder,
    parse_model_config,
    templates_dir,
    templates_hash,
    tensor_signature,
)
from pipeline.profiles import check_engine_compatible
from pipeline.versions import TRTLLM_VERSION

MODELS = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
LOGITS_DTYPES = {"fp32": "TYPE_FP32", "fp16": "TYPE_FP16", "bf16": "TYPE_BF16"}
# The engine's pretrained_config.logits_dtype (trtllm-build --logits_dtype; TensorRT-LLM's default is
# float32) -> our --logits-dtype name. The backend refuses logits requests when the declared Triton type
# differs from the engine's, so render takes it from the engine.
ENGINE_LOGITS_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# Python-backend stubs per BLS model: each instance is a process (memory, /dev/shm, start-up time), and a
# decoupled BLS instance serves several requests at once on its own threads, so a throughput engine with
# max_batch_size 1536 needs a handful of instances, not 1536.
BLS_MAX_DEFAULT_INSTANCES = 4
# tensorrt_llm parameter keys of the pinned release that are rendered only when set (the backend
# treats a missing key as unset): multi-GPU placement, encoder-decoder, LoRA, speculative decoding,
# sliding windows, guided decoding.
UNSET_PARAMETER_KEYS = (
    "encoder_model_path", "max_tokens_in_paged_kv_cache", "max_attention_window_size", "sink_token_length",
    "cross_kv_cache_fraction", "gpu_device_ids", "participant_ids", "lora_cache_optimal_adapter_size",
    "lora_cache_max_adapter_size", "lora_cache_gpu_memory_fraction", "lora_cache_host_memory_bytes",
    "lora_prefetch_dir", "decoding_mode", "lookahead_window_size", "lookahead_ngram_size",
    "lookahead_verification_set_size", "medusa_choices", "eagle_choices",
)
REFERENCE_TABLES = ("triton_trtllm_model_io.tsv", "triton_trtllm_parameters.tsv", "triton_trtllm_required_parameters.tsv")


class RenderSpec(BaseModel):
    """Everything that decides a rendered repository. Frozen, validated once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Path = Field(description="engine folder (trtllm-build output or reference runtime folder)")
    tokenizer: Path | None = Field(None, description="tokenizer folder (default: <engine>/tokenizer)")
    model_root: Path | None = Field(None, description="absolute path of the bundle where it is served (default: out)")
    runtime: Runtime | None = Field(None, description="default: the engine's config.json 'runtime', else tensorrtllm; for a "
                                    "PyTorch-backend deployable: reference when built with --gpu cpu, else llmapi")
    out: Path | None = Field(None, description="default: build/<model>/triton/<profile-id>/")
    decoupled: bool = True
    batching_strategy: Literal["inflight_fused_batching", "inflight_batching", "V1"] = "inflight_fused_batching"
    batch_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] = "guaranteed_no_evict"
    kv_cache_free_gpu_mem_fraction: float = Field(0.9, gt=0, le=1)
    max_tokens_in_paged_kv_cache: int | None = Field(None, ge=1)
    enable_kv_cache_reuse: bool | None = Field(
        None, description="default: what the engine can do (tensorrtllm engines built with paged context FMHA); "
        "false for reference")
    enable_chunked_context: bool = False
    exclude_input_in_output: bool = False
    max_queue_delay_us: int = Field(0, ge=0)
    max_queue_size: int = Field(0, ge=0, description="0: unlimited")
    queue_timeout_us: int = Field(0, ge=0, description="0: requests wait in the queue without a deadline")
    instances: int = Field(1, ge=1, description="preprocessing and postprocessing instances")
    bls_instances: int | None = Field(None, ge=1, description=f"default: min(max_batch_size, {BLS_MAX_DEFAULT_INSTANCES})")
    logits_dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        None, description="default: the engine's logits dtype; any other value is refused (the backend rejects a mismatch)")
    force: bool = False


def reference_tables_dir() -> Path:
    """$PIPELINE_REFERENCE_DIR, else the tables shipped in the package (pipeline/data/reference/).
    Every table of REFERENCE_TABLES must be there: a check without its facts is an error, not a skip."""
    override = os.environ.get("PIPELINE_REFERENCE_DIR")
    path = Path(override) if override else package_folder("pipeline.data", "contract tables", "PIPELINE_REFERENCE_DIR") / "reference"
    missing = [name for name in REFERENCE_TABLES if not (path / name).is_file()]
    if missing:
        raise StageFailedError(f"The contract tables render checks against are missing from {path}: {', '.join(missing)}.",
                               hint="Reinstall the pipeline (they ship in pipeline/data/reference/), or point "
                               "PIPELINE_REFERENCE_DIR at a folder with them (the project's shared/reference/).")
    return path


def read_engine_config(engine: Path) -> dict:
    path = Path(engine) / "config.json"
    if not path.is_file():
        raise InvalidInputError(f"{engine} is not an engine folder: it has no config.json.",
                                hint="Point --engine at the folder `pipeline build` wrote (build/<model>/engines/<profile-id>/).")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"{path} is not valid JSON: {error}.", hint="Rebuild the engine.") from error
    if not isinstance(config.get("build_config"), dict) or "max_batch_size" not in config["build_config"]:
        raise InvalidInputError(f"{path} has no build_config.max_batch_size.",
                                hint="Expected trtllm-build's config.json or a reference-runtime engine folder.")
    return config


def render(spec: RenderSpec) -> RenderResult:
    if looks_like_deployable(spec.engine):  # NVIDIA's LLM-API layout (pipeline/llmapi_repo.py)
        return render_llmapi(spec)
    if spec.runtime == "llmapi":
        raise InvalidInputError(f"--runtime llmapi renders a PyTorch-backend deployable; {spec.engine} is not one "
                                f"(it has no llm_api_options.yaml).",
                                hint="Build one with `pipeline build --backend pytorch`, or leave --runtime out for an engine folder.")
    started = time.time()
    engine = Path(spec.engine).resolve()
    config = read_engine_config(engine)
    # Version only: rendering needs no GPU (CI renders on CPU machines for GPU clusters); `serve`
    # checks the GPU too, where the engine is loaded.
    check_engine_compatible(engine, gpu_key=None, trtllm_version=None)
    build_config = config["build_config"]
    runtime: Runtime = spec.runtime or ("reference" if config.get("runtime") == "reference" else "tensorrtllm")
    if runtime == "reference" and config.get("runtime") != "reference":
        raise InvalidInputError(f"{engine} holds TensorRT engines; the reference runtime needs a reference engine folder.",
                                hint="Render it with --runtime tensorrtllm, or build with `pipeline build --gpu cpu`.")
    if runtime == "tensorrtllm" and config.get("runtime") == "reference":
        raise InvalidInputError(f"{engine} is a reference-runtime folder (HF checkpoint), not TensorRT engines.",
                                hint="Render it with --runtime reference, or build for a GPU with `pipeline build --gpu <gpu>`.")
    if runtime == "reference" and not (engine / "model" / "config.json").is_file():
        raise InvalidInputError(f"{engine}/model/ holds no HF checkpoint.", hint="Rebuild with `pipeline build --gpu cpu`.")
    tokenizer = Path(spec.tokenizer).resolve() if spec.tokenizer else engine / "tokenizer"
    if not tokenizer.is_dir() or not any(p.name.startswith("tokenizer") for p in bundle.tokenizer_files(tokenizer)):
        raise InvalidInputError(
            f"No tokenizer in {tokenizer}.",
            hint="Engines from `pipeline build` carry theirs in <engine>/tokenizer/; for an engine built elsewhere "
            "pass --tokenizer DIR (the HF checkpoint folder).")
    out = Path(spec.out).resolve() if spec.out else default_out_dir(engine)
    root = bundle.model_root(spec.model_root, out)
    outside_tokenizer = tokenizer if spec.tokenizer else None
    bundle.check_out(out, engine, outside_tokenizer)
    templates = templates_dir()
    features = engine_features(config, runtime, spec)
    context = template_context(spec, runtime, bundle.engine_path(root), bundle.tokenizer_path(root), build_config, features)
    inputs = {
        "spec": spec.model_dump(mode="json", exclude={"force"}),
        "runtime": runtime,
        "engine_config": sha256_json(config),
        "engine": bundle.tree_identity(engine),
        "tokenizer": bundle.tree_identity(outside_tokenizer, bundle.tokenizer_files(outside_tokenizer))
        if outside_tokenizer else None,
        "templates": templates_hash(templates),
        "context": context,
        "model_root": str(root),
    }
    inputs_hash = sha256_json(inputs)

    def result(checks: dict[str, str], reused: bool, summary: dict) -> RenderResult:
        return RenderResult(repo=out, runtime=runtime, models=list(MODELS), max_batch_size=context["triton_max_batch_size"],
                            engine=engine, tokenizer=tokenizer, checks=checks, notes=features.notes, reused=reused,
                            duration_s=round(time.time() - started, 3), model_root=root, bundle=summary)

    if not spec.force and is_up_to_date(out, inputs_hash):
        return result({"reused": "same inputs as the existing repository"}, True, bundle.summary(out))
    with atomic_dir(out) as tmp:
        write_repository(templates, tmp, context, runtime)
        checks = check_repository(tmp)
        stats = bundle.assemble(tmp, engine, root, outside_tokenizer)
        checks["paths"] = f"every path in every config is under {root} and in the bundle"
        summary = bundle.describe(root, stats)
        manifest_extra = {"runtime": runtime, "checks": checks, "profile": _engine_profile(engine), "bundle": summary}
        write_json_atomic(tmp / "manifest.json", build_manifest(
            stage="render", inputs=inputs, inputs_hash=inputs_hash, folder=tmp, started=started,
            packages=("jinja2", "tritonclient"), extra=manifest_extra, files=bundle.bundle_files(tmp, engine)))
    return result(checks, False, summary)


class EngineFeatures(BaseModel):
    """What the engine was built to do, as far as the rendered tensorrt_llm config depends on it."""

    model_config = ConfigDict(frozen=True)

    logits_dtype: Literal["fp32", "fp16", "bf16"]
    kv_cache_reuse: bool
    chunked_context: bool
    notes: list[str]


def engine_features(config: dict, runtime: Runtime, spec: RenderSpec) -> EngineFeatures:
    """Logits dtype, prefix caching and chunked context as the engine allows them; a request for what the
    engine cannot do is refused (InvalidInputError) rather than rendered and silently turned off at load."""
    notes: list[str] = []
    pretrained = config.get("pretrained_config") or {}
    engine_logits = str(pretrained.get("logits_dtype") or "float32")
    if runtime == "reference":
        logits = spec.logits_dtype or "fp32"
    else:
        logits = ENGINE_LOGITS_DTYPES.get(engine_logits)
        if logits is None:
            raise InvalidInputError(f"The engine's pretrained_config.logits_dtype {engine_logits!r} has no Triton type here.",
                                    hint=f"Rebuild with --logits_dtype float32 (known: {', '.join(ENGINE_LOGITS_DTYPES)}).")
        if spec.logits_dtype and spec.logits_dtype != logits:
            raise InvalidInputError(
                f"--logits-dtype {spec.logits_dtype} does not match the engine's logits_dtype {engine_logits}: the "
                "tensorrt_llm backend refuses every context/generation-logits request when the two differ.",
                hint=f"Drop --logits-dtype (render takes {logits} from the engine), or rebuild with "
                f"--logits_dtype {dict((v, k) for k, v in ENGINE_LOGITS_DTYPES.items())[spec.logits_dtype]}.")
    plugin = (config.get("build_config") or {}).get("plugin_config") or {}
    paged_context = bool(plugin.get("use_paged_context_fmha"))
    if runtime == "reference":
        reuse = bool(spec.enable_kv_cache_reuse)
        return EngineFeatures(logits_dtype=logits, kv_cache_reuse=reuse, chunked_context=spec.enable_chunked_context,
                              notes=notes)
    kv_algo = ((pretrained.get("quantization") or {}).get("kv_cache_quant_algo") or "")
    why_not = None if paged_context else (
        f"the engine was built without paged context FMHA ({kv_algo} KV cache)" if kv_algo
        else "the engine was built without paged context FMHA")
    for option, asked in (("--enable-kv-cache-reuse", spec.enable_kv_cache_reuse),
                          ("--enable-chunked-context", spec.enable_chunked_context)):
        if asked and why_not:
            raise InvalidInputError(
                f"{option} needs paged context FMHA, and {why_not}: TensorRT-LLM's executor would turn it off "
                "without a word.",
                hint=f"Drop {option}, or rebuild with --use_paged_context_fmha enable (not possible with an INT8 KV "
                "cache, or an FP8 KV cache without FP8 context FMHA).")
    reuse = spec.enable_kv_cache_reuse if spec.enable_kv_cache_reuse is not None else why_not is None
    if why_not and spec.enable_kv_cache_reuse is None:
        notes.append(f"prefix caching (KV-cache reuse) is off: {why_not}")
    return EngineFeatures(logits_dtype=logits, kv_cache_reuse=reuse, chunked_context=spec.enable_chunked_context,
                          notes=notes)


def bls_instances(spec: RenderSpec, max_batch_size: int) -> tuple[int, int]:
    """(BLS instances, requests each instance serves at once). Each instance may take max_batch_size
    requests: its execute returns at once, so Triton may hand any one instance most of the requests, and
    a smaller per-instance cap would queue them inside it while others sit idle."""
    return spec.bls_instances or min(max_batch_size, BLS_MAX_DEFAULT_INSTANCES), max_batch_size


def template_context(spec: RenderSpec, runtime: Runtime, engine: Path, tokenizer: Path, build_config: dict,
                     features: EngineFeatures) -> dict:
    max_batch_size = int(build_config["max_batch_size"])
    bls_count, bls_concurrency = bls_instances(spec, max_batch_size)
    reuse = features.kv_cache_reuse
    parameters = {
        "max_beam_width": str(int(build_config.get("max_beam_width", 1))),
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": spec.batching_strategy,
        "gpt_model_path": str(engine),
        "batch_scheduler_policy": spec.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": f"{spec.kv_cache_free_gpu_mem_fraction:g}",
        "kv_cache_host_memory_bytes": "0",
        "kv_cache_onboard_blocks": "true",
        "exclude_input_in_output": _bool(spec.exclude_input_in_output),
        "enable_kv_cache_reuse": _bool(reuse),
        "enable_chunked_context": _bool(features.chunked_context),
        "normalize_log_probs": "true",
        "cancellation_check_period_ms": "100",
        "stats_check_period_ms": "100",
        "iter_stats_max_iterations": "1000",
        "request_stats_max_iterations": "0",
        "num_nodes": "1",
        "gpu_weights_percent": "1.0",
        "enable_context_fmha_fp32_acc": "false",
        "multi_block_mode": "true",
        "cuda_graph_mode": "false",
        "cuda_graph_cache_size": "0",
        "speculative_decoding_fast_logits": "false",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "tokenizer_dir": str(tokenizer),
        # Read by the C++ backend without a default (shared/reference/triton_trtllm_required_parameters.tsv):
        # empty means guided decoding off.
        "guided_decoding_backend": "",
        "xgrammar_tokenizer_info_path": "",
    }
    if spec.max_tokens_in_paged_kv_cache:
        parameters["max_tokens_in_paged_kv_cache"] = str(spec.max_tokens_in_paged_kv_cache)
    return {
        "runtime": runtime,
        "trtllm_version": TRTLLM_VERSION,
        "triton_backend": "python" if runtime == "reference" else "tensorrtllm",
        "triton_max_batch_size": max_batch_size,
        "decoupled_mode": _bool(spec.decoupled),
        "max_queue_delay_microseconds": spec.max_queue_delay_us,
        "max_queue_size": spec.max_queue_size,
        "queue_timeout_microseconds": spec.queue_timeout_us,
        "logits_datatype": LOGITS_DTYPES[features.logits_dtype],
        "encoder_input_features_data_type": "TYPE_FP16",
        "prompt_embedding_table_data_type": "TYPE_FP16",
        "tokenizer_dir": str(tokenizer),
        "max_input_len": int(build_config.get("max_input_len") or 0),
        "add_special_tokens": "true",
        "skip_special_tokens": "true",
        "preprocessing_instance_count": spec.instances,
        "postprocessing_instance_count": spec.instances,
        "bls_instance_count": bls_count,
        "bls_concurrency": bls_concurrency,
        "accumulate_tokens": "false",
        "tensorrt_llm_parameters": parameters,
    }


def write_repository(templates: Path, out: Path, context: dict, runtime: Runtime) -> None:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    for model in MODELS:
        source = templates / model
        target = out / model
        (target / "1").mkdir(parents=True, exist_ok=True)
        try:
            text = env.get_template(f"{model}/config.pbtxt.j2").render(**context)
        except jinja2.TemplateNotFound as error:
            raise InvalidInputError(
                f"The template folder {templates} has no {model}/config.pbtxt.j2 (missing: {error.name}); a Triton "
                f"repository needs every model of {', '.join(MODELS)}.",
                hint="Restore the missing model folder, or unset PIPELINE_TEMPLATES_DIR to use the project's own "
                "model_repo_templates/.") from error
        except jinja2.UndefinedError as error:
            raise StageFailedError(f"Template {model}/config.pbtxt.j2 uses a value render does not set: {error}.",
                                   hint="This is a template bug; fix the template or render.template_context.") from error
        (target / "config.pbtxt").write_text(text, encoding="utf-8")
        model_py = source / "1" / "model.py"
        if model_py.is_file() and not (model == "tensorrt_llm" and runtime == "tensorrtllm"):
            shutil.copy2(model_py, target / "1" / "model.py")


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def check_repository(repo: Path) -> dict[str, str]:
    """Run every check on a rendered repository; raise StageFailedError naming the first problems."""
    problems: list[str] = []
    checks: dict[str, str] = {}
    configs = {}
    for model in MODELS:
        path = repo / model / "config.pbtxt"
        if not path.is_file():
            problems.append(f"{model}/config.pbtxt is missing")
            continue
        configs[model] = parse_model_config(path)
        if configs[model].name != model:
            problems.append(f"{model}/config.pbtxt names the model {configs[model].name!r}")
    checks["protobuf"] = f"{len(configs)} config.pbtxt parse into ModelConfig"
    leftovers = [
        f"{path.relative_to(repo)}: {marker}"
        for path in sorted(repo.rglob("*")) if path.is_file() and path.suffix in (".pbtxt", ".py", ".json")
        for marker in LEFTOVER_MARKERS if marker in path.read_text(encoding="utf-8", errors="replace")
    ]
    problems += [f"unrendered template text in {item}" for item in leftovers]
    checks["placeholders"] = "no ${, {{ or {% left"
    if "ensemble" in configs:
        problems += ensemble_problems(configs)
        checks["ensemble"] = "every step maps declared tensors; every read tensor is produced"
    tables = reference_tables_dir()
    if "tensorrt_llm" in configs:
        problems += contract_problems(configs["tensorrt_llm"], tables)
    checks["contract"] = f"tensorrt_llm tensors and parameter keys match {tables}"
    if problems:  # exit 2: what the templates would write is a repository NVIDIA's runtime rejects
        raise InvalidInputError("The rendered repository failed its checks:\n  " + "\n  ".join(problems[:20]),
                                hint="Fix the templates (model_repo_templates/, or PIPELINE_TEMPLATES_DIR); nothing was "
                                "written to the output folder.")
    return checks


def ensemble_problems(configs: dict) -> list[str]:
    ensemble = configs["ensemble"]
    available = {t.name for t in ensemble.input}
    produced: set[str] = set()
    problems = []
    for step in ensemble.ensemble_scheduling.step:
        model = configs.get(step.model_name)
        if model is None:
            problems.append(f"ensemble step calls unknown model {step.model_name!r}")
            continue
        inputs, outputs = {t.name for t in model.input}, {t.name for t in model.output}
        for key, value in step.input_map.items():
            if key not in inputs:
                problems.append(f"ensemble step {step.model_name}: input_map key {key!r} is not an input of the model")
            if value not in available and value not in produced:
                problems.append(f"ensemble step {step.model_name}: reads {value!r}, which nothing before it produces")
        for key, value in step.output_map.items():
            if key not in outputs:
                problems.append(f"ensemble step {step.model_name}: output_map key {key!r} is not an output of the model")
            produced.add(value)
        required = {t.name for t in model.input if not t.optional}
        missing = required - set(step.input_map.keys())
        if missing:
            problems.append(f"ensemble step {step.model_name}: required inputs {sorted(missing)} are not mapped")
    for output in ensemble.output:
        if output.name not in produced:
            problems.append(f"ensemble output {output.name!r} is produced by no step")
    return problems


def read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def contract_problems(config, tables: Path, model: str = "tensorrt_llm") -> list[str]:
    """Differences between a rendered model's tensors/parameter keys and the reference tables."""
    problems = []
    rows = [r for r in read_tsv(tables / "triton_trtllm_model_io.tsv") if r["model"] == model]
    for direction, tensors in (("input", config.input), ("output", config.output)):
        expected = {r["name"]: r for r in rows if r["direction"] == direction}
        actual = {t.name: tensor_signature(t, direction == "input") for t in tensors}
        for name in sorted(set(expected) - set(actual)):
            problems.append(f"{model} {direction} {name!r} of the reference contract is missing")
        for name in sorted(set(actual) - set(expected)):
            problems.append(f"{model} {direction} {name!r} is not in the reference contract")
        for name in sorted(set(actual) & set(expected)):
            want, have = expected[name], actual[name]
            for field in ("data_type", "dims", "optional", "allow_ragged_batch", "reshape"):
                wanted = want[field]
                if field == "data_type" and wanted.startswith("${"):
                    continue  # a placeholder in the upstream template: any concrete type
                if field == "dims":
                    wanted = "[" + ", ".join(p.strip() for p in wanted.strip("[]").split(",") if p.strip()) + "]"
                if have[field] != wanted:
                    problems.append(f"{model} {direction} {name!r}: {field} is {have[field]!r}, the reference says {wanted!r}")
    keys = {r["parameter_key"] for r in read_tsv(tables / "triton_trtllm_parameters.tsv")
            if r["model"] == model and r["kind"] == "parameter"}
    rendered = set(config.parameters.keys())
    for key in sorted(rendered - keys):
        problems.append(f"{model} parameter {key!r} is not a parameter of the pinned release")
    for key in sorted(keys - rendered - set(UNSET_PARAMETER_KEYS)):
        problems.append(f"{model} parameter {key!r} of the pinned release is neither rendered nor listed as unset")
    required = tables / "triton_trtllm_required_parameters.tsv"
    if not required.is_file():
        problems.append(f"{required} is missing: cannot check the parameters the backend reads without a default")
        return problems
    for row in read_tsv(required):
        if row["model"] == model and row["parameter_key"] not in rendered:
            problems.append(f"{model} parameter {row['parameter_key']!r} is missing: the backend reads it without a "
                            f"default ({row['read_at'].split(' ')[0]}), so the model would not load")
    return problems


def _engine_profile(engine: Path) -> dict | None:
    manifest = engine / "manifest.json"
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("profile") if manifest.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def _bool(value: bool) -> str:
    return "true" if value else "false"

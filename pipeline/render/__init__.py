"""render: an engine folder -> a Triton model repository (preprocessing, tensorrt_llm, postprocessing,
ensemble, tensorrt_llm_bls) from the Jinja templates in model_repo_templates/ (installed as the package
pipeline.model_repo_templates; $PIPELINE_TEMPLATES_DIR overrides it). A PyTorch-backend deployable is
rendered into NVIDIA's LLM-API layout instead (pipeline/render/llmapi.py).

The repository is a bundle (pipeline/render/bundle.py): it holds the engine and the tokenizer too, and every
path in its configs starts with its model root (`--model-root`, default: the folder itself).

Values the engine fixes (max_batch_size, beam width, tokenizer) come from the engine folder's
config.json; operators choose the rest (RenderSpec, pipeline/render/spec.py). The template values are
pipeline/render/context.py's. The repository is written to a temporary folder, checked there
(pipeline/render/checks.py: protobuf, leftover template text, ensemble wiring, the pinned release's
contract tables; then the bundle's paths), and renamed into place only when every check passed.

This module holds the stage itself: reading the engine folder, writing the five models, the manifest
and the result.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.render import bundle
from pipeline import __version__ as PIPELINE_VERSION
from pipeline.core.artifacts import ArtifactOrigin, atomic_dir, build_manifest, reusable, sha256_json, write_json_atomic
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.render.llmapi import looks_like_deployable, render_llmapi
from pipeline.render.model_repo import (RenderResult, Runtime, copy_python_model, default_out_dir, templates_dir,
                                 templates_hash)
from pipeline.build.profiles import check_engine_compatible
from pipeline.render.checks import check_repository
from pipeline.render.context import engine_features, template_context
from pipeline.render.lora import lora_parameters
from pipeline.render.spec import MODELS, RenderSpec
from pipeline.render import slo, speculative
from pipeline.hf.tokenizer import tokenizer_files


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
    if looks_like_deployable(spec.engine):  # NVIDIA's LLM-API layout (pipeline/render/llmapi.py)
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
    if not tokenizer.is_dir() or not any(p.name.startswith("tokenizer") for p in tokenizer_files(tokenizer)):
        raise InvalidInputError(
            f"No tokenizer in {tokenizer}.",
            hint="Engines from `pipeline build` carry theirs in <engine>/tokenizer/; for an engine built elsewhere "
            "pass --tokenizer DIR (the HF checkpoint folder).")
    out = Path(spec.out).resolve() if spec.out else default_out_dir(engine)
    root = bundle.model_root(spec.model_root, out)
    outside_tokenizer = tokenizer if spec.tokenizer else None
    bundle.check_out(out, engine, outside_tokenizer)
    templates = templates_dir()
    fraction, fraction_notes = slo.kv_fraction(spec.kv_cache_free_gpu_mem_fraction, engine)
    spec = spec.model_copy(update={"kv_cache_free_gpu_mem_fraction": fraction})
    features = engine_features(config, runtime, spec)
    context = template_context(spec, runtime, bundle.engine_path(root), bundle.tokenizer_path(root), build_config, features)
    record = speculative.speculative_record(engine, config)
    draft = speculative.draft_engine(engine, record)
    context["tensorrt_llm_parameters"].update(speculative.lookahead_parameters(record))
    context["draft_model_name"] = speculative.DRAFT_MODEL if draft else ""
    context["tensorrt_llm_parameters"].update(lora_parameters(engine, config, bundle.engine_path(root)))
    inputs = {
        "spec": spec.model_dump(mode="json", exclude={"force"}),
        "runtime": runtime,
        "engine_config": sha256_json(config),
        "engine": bundle.tree_identity(engine),
        "tokenizer": bundle.tree_identity(outside_tokenizer, tokenizer_files(outside_tokenizer))
        if outside_tokenizer else None,
        "templates": templates_hash(templates),
        "pipeline_version": PIPELINE_VERSION,  # the reference model refuses another installed pipeline at load
        "context": context,
        "model_root": str(root),
    }
    inputs_hash = sha256_json(inputs)

    def result(checks: dict[str, str], reused: bool, summary: dict) -> RenderResult:
        models = [*MODELS, speculative.DRAFT_MODEL] if draft else list(MODELS)
        return RenderResult(repo=out, runtime=runtime, models=models, max_batch_size=context["triton_max_batch_size"],
                            engine=engine, tokenizer=tokenizer, checks=checks, notes=[*features.notes, *fraction_notes], reused=reused,
                            duration_s=round(time.time() - started, 3), model_root=root, bundle=summary)

    if not spec.force and reusable(out, inputs_hash):
        return result({"reused": "same inputs as the existing repository"}, True, bundle.summary(out))
    with atomic_dir(out) as tmp:
        write_repository(templates, tmp, context, runtime)
        if draft is not None:  # the tensorrt_llm template again, for the draft engine carried in the bundle
            draft_path = bundle.engine_path(root) / draft.relative_to(engine).as_posix()
            write_repository(templates, tmp, speculative.draft_context(context, draft, draft_path), runtime,
                             models={speculative.DRAFT_MODEL: "tensorrt_llm"})
        checks = check_repository(tmp)
        stats = bundle.assemble(tmp, engine, root, outside_tokenizer)
        checks["paths"] = f"every path in every config is under {root} and in the bundle"
        summary = bundle.describe(root, stats)
        manifest_extra = {"runtime": runtime, "checks": checks, "profile": _engine_profile(engine), "bundle": summary,
                          "pipeline_version": PIPELINE_VERSION}
        write_json_atomic(tmp / "manifest.json", build_manifest(
            ArtifactOrigin("render", inputs, inputs_hash, ("jinja2", "tritonclient")), tmp, started, extra=manifest_extra, files=bundle.bundle_files(tmp, engine)))
    return result(checks, False, summary)


def write_repository(templates: Path, out: Path, context: dict, runtime: Runtime,
                     models: dict[str, str] | None = None) -> None:
    """Each model of `models` (name -> template folder; default: MODELS, each from its own) into out."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    for model, folder in (models or {name: name for name in MODELS}).items():
        source = templates / folder
        target = out / model
        (target / "1").mkdir(parents=True, exist_ok=True)
        try:
            text = env.get_template(f"{folder}/config.pbtxt.j2").render(**{"model_name": model, **context})
        except jinja2.TemplateNotFound as error:
            raise InvalidInputError(
                f"The template folder {templates} has no {model}/config.pbtxt.j2 (missing: {error.name}); a Triton "
                f"repository needs every model of {', '.join(MODELS)}.",
                hint="Restore the missing model folder, or unset PIPELINE_TEMPLATES_DIR to use the project's own "
                "model_repo_templates/.") from error
        except jinja2.UndefinedError as error:
            raise StageFailedError(f"Template {model}/config.pbtxt.j2 uses a value render does not set: {error}.",
                                   hint="This is a template bug; fix the template or "
                                   "render_context.template_context.") from error
        (target / "config.pbtxt").write_text(text, encoding="utf-8")
        model_py = source / "1" / "model.py"
        if model_py.is_file() and not (folder == "tensorrt_llm" and runtime == "tensorrtllm"):
            copy_python_model(templates, model_py, target / "1")


def _engine_profile(engine: Path) -> dict | None:
    manifest = engine / "manifest.json"
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("profile") if manifest.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None

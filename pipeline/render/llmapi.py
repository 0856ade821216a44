"""render for a PyTorch-backend deployable: NVIDIA's Triton LLM-API layout (TensorRT-LLM
triton_backend/all_models/llmapi/), as a self-contained bundle (pipeline/render/bundle.py):

    ROOT/manifest.json                     the render manifest (model_root, checks)
    ROOT/tensorrt_llm/config.pbtxt         their tensor contract (pipeline/data/llmapi/contract.json)
    ROOT/tensorrt_llm/1/model.py           ours: tensorrt_llm.LLM in the image, the reference runtime on the CPU
    ROOT/tensorrt_llm/1/pipeline_model_support.py   what model.py imports beside it (model_repo.copy_python_model)
    ROOT/tensorrt_llm/1/model.yaml         backend: pytorch, model: ROOT/tensorrt_llm/1/model, the LLM options,
                                           triton_config (max_batch_size 0, decoupled, runtime)
    ROOT/tensorrt_llm/1/model/             the deployable's HF checkpoint (hard links)
    ROOT/tensorrt_llm/1/llm_api_options.yaml, manifest.json   the deployable's own files

The runtime is `llmapi` (TensorRT-LLM's PyTorch backend) unless the deployable was built with `--gpu cpu`
(its manifest's profile), which gives `reference`; `--runtime` overrides it. The repository is written to a
temporary folder, checked there (config.pbtxt parses into Triton's ModelConfig and its tensors equal the
recorded contract; no template text left; model.yaml names a model folder inside the bundle root) and renamed
into place only when every check passed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.render import bundle
from pipeline.core.artifacts import ArtifactOrigin, atomic_dir, build_manifest, reusable, sha256_json, write_json_atomic
from pipeline.core.deployable import MODEL_SUBDIR, OPTIONS_FILE, Deployable, read_deployable
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.render.lora import relocate_lora_dirs
from pipeline.render.model_repo import (
    LEFTOVER_MARKERS, RenderResult, copy_python_model, default_out_dir, package_folder, parse_model_config,
    templates_dir, templates_hash, tensor_signature,
)

MODEL = "tensorrt_llm"
TEMPLATE_DIR = "llmapi"
CONTRACT_FILE = "llmapi/contract.json"
LLMAPI_RUNTIMES = ("llmapi", "reference")
# Keys model.yaml sets itself: an options file carrying them would contradict the deployable.
RESERVED_OPTION_KEYS = ("model", "triton_config")
# RenderSpec fields that shape the engine path's five models and mean nothing to the LLM-API model.
ENGINE_ONLY_FIELDS = ("tokenizer", "batching_strategy", "batch_scheduler_policy", "kv_cache_free_gpu_mem_fraction",
                      "max_tokens_in_paged_kv_cache", "enable_kv_cache_reuse", "enable_chunked_context",
                      "exclude_input_in_output", "max_queue_delay_us", "max_queue_size", "queue_timeout_us",
                      "instances", "bls_instances", "logits_dtype")


def looks_like_deployable(folder: Path) -> bool:
    """What render hands to this module: a folder with llm_api_options.yaml (every PyTorch-backend deployable
    has one; read_deployable then says what is wrong with an incomplete one)."""
    return (Path(folder) / OPTIONS_FILE).is_file()


def read_llmapi_deployable(folder: Path) -> Deployable:
    """pipeline.core.deployable.read_deployable, plus: the options must not set what model.yaml sets itself."""
    deployable = read_deployable(Path(folder).resolve())
    clashing = [key for key in RESERVED_OPTION_KEYS if key in deployable.options]
    if deployable.options.get("backend", "pytorch") != "pytorch":
        clashing.append(f"backend={deployable.options['backend']}")
    if clashing:
        raise InvalidInputError(f"{deployable.options_path} sets {', '.join(clashing)}, which the LLM-API repository "
                                "sets itself.", hint="Rebuild the deployable; its options file holds only LLM-API options.")
    return deployable


def contract_path() -> Path:
    path = package_folder("pipeline.data", "contract tables", "PIPELINE_REFERENCE_DIR") / CONTRACT_FILE
    if not path.is_file():
        raise StageFailedError(f"The LLM-API tensor contract render checks against is missing ({path}).",
                               hint="Reinstall the pipeline (it ships in pipeline/data/llmapi/).")
    return path


def read_contract() -> dict:
    return json.loads(contract_path().read_text(encoding="utf-8"))


def _refuse_engine_options(spec) -> None:
    defaults = type(spec).model_fields
    changed = [name for name in ENGINE_ONLY_FIELDS if getattr(spec, name) != defaults[name].default]
    if changed:
        raise InvalidInputError(
            f"{', '.join('--' + n.replace('_', '-') for n in changed)} shape(s) the engine path's Triton models; a "
            "PyTorch-backend deployable renders the LLM-API model, whose settings are the deployable's LLM options.",
            hint="Drop those options (change the LLM options with `pipeline build --backend pytorch`), or render an "
            "engine folder from `pipeline build` (--backend tensorrt).")


def render_llmapi(spec):
    """render() for a PyTorch-backend deployable (spec: pipeline.render.RenderSpec)."""
    started = time.time()
    deployable = read_llmapi_deployable(spec.engine)
    folder, options, manifest = deployable.path, deployable.options, deployable.manifest
    _refuse_engine_options(spec)
    runtime = spec.runtime or ("reference" if deployable.is_cpu else "llmapi")
    if runtime not in LLMAPI_RUNTIMES:
        raise InvalidInputError(f"--runtime {runtime} renders TensorRT engines; {folder} is a PyTorch-backend deployable.",
                                hint="Leave --runtime out, or give llmapi (TensorRT-LLM's PyTorch backend) or reference (CPU).")
    out = Path(spec.out).resolve() if spec.out else default_out_dir(folder)
    root = bundle.model_root(spec.model_root, out)
    bundle.check_out(out, folder, None)
    templates = templates_dir()
    if not (templates / TEMPLATE_DIR / MODEL / "config.pbtxt.j2").is_file():
        raise StageFailedError(f"The template folder {templates} has no {TEMPLATE_DIR}/{MODEL}/ (the LLM-API model).",
                               hint="Unset PIPELINE_TEMPLATES_DIR, or copy model_repo_templates/llmapi/ into it.")
    options = relocate_lora_dirs(options, folder, bundle.engine_path(root))  # the adapters, where the bundle holds them
    context = llmapi_context(draft_under_root(options, folder, bundle.engine_path(root)), runtime,
                             bundle.engine_path(root) / MODEL_SUBDIR, spec.decoupled,
                             deployable.simulated if runtime == "reference" else None)
    inputs = {"spec": spec.model_dump(mode="json", exclude={"force"}), "runtime": runtime, "options": options,
              "deployable": bundle.tree_identity(folder), "templates": templates_hash(templates),
              "context": context, "model_root": str(root)}
    inputs_hash = sha256_json(inputs)
    notes = [f"runtime {runtime}: " + ("pipeline's reference runtime on the CPU (deployable built with --gpu cpu)"
                                       if runtime == "reference" else "tensorrt_llm.LLM, TensorRT-LLM's PyTorch backend")]

    def result(checks: dict[str, str], reused: bool, summary: dict) -> RenderResult:
        return RenderResult(repo=out, runtime=runtime, models=[MODEL], max_batch_size=0, engine=folder,
                            tokenizer=folder / MODEL_SUBDIR, checks=checks, notes=notes, reused=reused,
                            duration_s=round(time.time() - started, 3), model_root=root, bundle=summary)

    if not spec.force and reusable(out, inputs_hash):
        return result({"reused": "same inputs as the existing repository"}, True, bundle.summary(out))
    with atomic_dir(out) as tmp:
        write_llmapi_repository(templates, tmp, context)
        checks = check_llmapi_repository(tmp, decoupled=spec.decoupled)
        stats = bundle.assemble(tmp, folder, root)
        checks["paths"] = f"model.yaml's model is {context['model_path']}, under {root} and in the bundle"
        summary = {**bundle.describe(root, stats), "layout": "llmapi", "model_dir": f"{bundle.ENGINE_SUBDIR}/{MODEL_SUBDIR}"}
        extra = {"runtime": runtime, "layout": "llmapi", "backend": "pytorch", "checks": checks,
                 "profile": manifest.get("profile"), "bundle": summary}
        write_json_atomic(tmp / "manifest.json", build_manifest(
            ArtifactOrigin("render", inputs, inputs_hash, ("jinja2", "tritonclient")), tmp, started, extra=extra, files=bundle.bundle_files(tmp, folder)))
    return result(checks, False, summary)


def draft_under_root(options: dict, folder: Path, engine_root: Path) -> dict:
    """speculative_config.speculative_model_dir names the deployable's draft/ (pipeline/build/pytorch_speculative.py):
    in the bundle it is that folder under the bundle's root."""
    config = options.get("speculative_config")
    draft = config.get("speculative_model_dir") if isinstance(config, dict) else None
    if not isinstance(draft, str) or not Path(draft).is_absolute() or not Path(draft).is_relative_to(Path(folder).resolve()):
        return options
    moved = str(engine_root / Path(draft).relative_to(Path(folder).resolve()))
    return {**options, "speculative_config": {**config, "speculative_model_dir": moved}}


def llmapi_context(options: dict, runtime: str, model_path: Path, decoupled: bool,
                   simulated: tuple[str, str] | None = None) -> dict:
    """Template values. simulated: the (quant, kv_cache) the reference runtime simulates over model/'s 16-bit
    weights (a --gpu cpu deployable of a quantized precision); None serves the weights as they are."""
    import yaml

    options = {key: value for key, value in options.items() if key != "backend"}
    return {
        "simulated": json.dumps({"quant": simulated[0], "kv_cache": simulated[1]}) if simulated else "null",
        "runtime": runtime,
        "runtime_note": "runtime reference: pipeline's reference runtime on the CPU" if runtime == "reference"
        else "runtime llmapi: tensorrt_llm.LLM, TensorRT-LLM's PyTorch backend",
        "model_path": str(model_path),
        "options_yaml": yaml.safe_dump(options, sort_keys=False, default_flow_style=False).rstrip() if options else "",
        "decoupled": "true" if decoupled else "false",
        "cancellation_check_period_ms": 100,
    }


def write_llmapi_repository(templates: Path, out: Path, context: dict) -> None:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates / TEMPLATE_DIR)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    target = out / MODEL / "1"
    target.mkdir(parents=True)
    for name, destination in (("config.pbtxt.j2", out / MODEL / "config.pbtxt"), ("1/model.yaml.j2", target / "model.yaml")):
        try:
            text = env.get_template(f"{MODEL}/{name}").render(**context)
        except jinja2.TemplateNotFound as error:
            raise StageFailedError(f"The LLM-API templates lack {TEMPLATE_DIR}/{MODEL}/{name}.",
                                   hint="Restore model_repo_templates/llmapi/, or unset PIPELINE_TEMPLATES_DIR.") from error
        except jinja2.UndefinedError as error:
            raise StageFailedError(f"Template {TEMPLATE_DIR}/{MODEL}/{name} uses a value render does not set: {error}.",
                                   hint="This is a template bug; fix the template or llmapi_repo.llmapi_context.") from error
        destination.write_text(text, encoding="utf-8")
    copy_python_model(templates, templates / TEMPLATE_DIR / MODEL / "1" / "model.py", target)


def contract_problems(config, contract: dict) -> list[str]:
    """Differences between a parsed tensorrt_llm config.pbtxt and the recorded LLM-API contract."""
    problems = []
    if config.name != contract["model"]["name"]:
        problems.append(f"the model is named {config.name!r}, the contract says {contract['model']['name']!r}")
    if config.backend != contract["model"]["backend"]:
        problems.append(f"backend is {config.backend!r}, the contract says {contract['model']['backend']!r}")
    for direction, tensors in (("input", config.input), ("output", config.output)):
        expected = {t["name"]: t for t in contract[f"{direction}s"]}
        actual = {t.name: tensor_signature(t, direction == "input") for t in tensors}
        problems += [f"{direction} {name!r} of the contract is missing" for name in sorted(set(expected) - set(actual))]
        problems += [f"{direction} {name!r} is not in the contract" for name in sorted(set(actual) - set(expected))]
        for name in sorted(set(actual) & set(expected)):
            want, have = expected[name], actual[name]
            wanted = {"data_type": want["data_type"], "dims": "[" + ", ".join(str(d) for d in want["dims"]) + "]",
                      "optional": "yes" if want.get("optional") else "no", "reshape": ""}
            problems += [f"{direction} {name!r}: {field} is {have[field]!r}, the contract says {value!r}"
                         for field, value in wanted.items() if have[field] != value]
    if config.max_batch_size != 0:
        problems.append(f"config.pbtxt sets max_batch_size {config.max_batch_size}; model.yaml triton_config sets it")
    if config.HasField("model_transaction_policy"):
        problems.append("config.pbtxt sets the transaction policy; model.yaml triton_config sets it")
    return problems


def model_yaml_problems(model_yaml: Path, decoupled: bool) -> list[str]:
    import yaml

    try:
        data = yaml.safe_load(model_yaml.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        return [f"{model_yaml.name} is not valid YAML: {error}"]
    problems = []
    if not isinstance(data, dict):
        return [f"{model_yaml.name} holds no mapping"]
    if data.get("backend") != "pytorch":
        problems.append(f"model.yaml backend is {data.get('backend')!r}, not 'pytorch'")
    if not isinstance(data.get("model"), str) or not data["model"].startswith("/"):
        problems.append(f"model.yaml model is {data.get('model')!r}, not an absolute path")
    triton = data.get("triton_config")
    if not isinstance(triton, dict):
        return problems + ["model.yaml has no triton_config mapping"]
    if triton.get("max_batch_size") != 0:
        problems.append(f"triton_config.max_batch_size is {triton.get('max_batch_size')!r}; the LLM-API model takes 0")
    if triton.get("decoupled") is not decoupled:
        problems.append(f"triton_config.decoupled is {triton.get('decoupled')!r}, asked for {decoupled}")
    if triton.get("runtime") not in LLMAPI_RUNTIMES:
        problems.append(f"triton_config.runtime is {triton.get('runtime')!r}, not one of {', '.join(LLMAPI_RUNTIMES)}")
    return problems


def check_llmapi_repository(repo: Path, *, decoupled: bool) -> dict[str, str]:
    """Every check on a rendered LLM-API repository; InvalidInputError (exit 2) naming the problems."""
    config_path = repo / MODEL / "config.pbtxt"
    config = parse_model_config(config_path)
    contract = read_contract()
    problems = [f"{MODEL}: {p}" for p in contract_problems(config, contract)]
    problems += model_yaml_problems(repo / MODEL / "1" / "model.yaml", decoupled)
    problems += [f"unrendered template text in {path.relative_to(repo)}: {marker}"
                 for path in sorted(repo.rglob("*")) if path.is_file() and path.suffix in (".pbtxt", ".yaml")
                 for marker in LEFTOVER_MARKERS if marker in path.read_text(encoding="utf-8", errors="replace")]
    if problems:
        raise InvalidInputError("The rendered LLM-API repository failed its checks:\n  " + "\n  ".join(problems[:20]),
                                hint="Fix model_repo_templates/llmapi/ (or PIPELINE_TEMPLATES_DIR); nothing was written.")
    source = contract["source"]["config.pbtxt"].split("@")
    return {"protobuf": "tensorrt_llm/config.pbtxt parses into ModelConfig",
            "contract": f"tensors equal NVIDIA's LLM-API contract ({source[0]} @{source[1][:8]})",
            "model.yaml": f"backend pytorch, model path, triton_config (max_batch_size 0, decoupled {decoupled})",
            "placeholders": "no ${, {{ or {% left"}

"""`pipeline k8s render` for a PyTorch-backend deployable (engines/<id>/ with model/ and llm_api_options.yaml).

Two APIs, everything else as for engines (stores, GPU affinity, security context, /dev/shm, probes, PDB,
HPA, monitoring, validation):
- `--api triton`: tritonserver on the Triton LLM-API repository `pipeline render` makes of the
  deployable (tensorrt_llm/config.pbtxt + 1/model.yaml, backend: pytorch), rendered for /models. One
  tritonserver process: the LLM API starts its own tensor-parallel workers.
- `--api openai`: `trtllm-serve` (pipeline/serve/commands.py) on a bundle of the deployable itself:
  /models/model/ (hard links), /models/llm_api_options.yaml (the planner's options plus
  `return_perf_metrics: true`, without which trtllm-serve mounts no /prometheus/metrics) and a
  manifest.json naming the bundle, which the pvc/s3 stores' wait and sync scripts look for.
Their monitoring and autoscaling: pipeline/k8s/monitoring.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from pipeline.core.artifacts import (
    MANIFEST_NAME,
    ArtifactOrigin,
    atomic_dir,
    build_manifest,
    file_record,
    reusable,
    link_or_copy,
    read_manifest,
    sha256_json,
)
from pipeline.render.bundle import tree_identity
from pipeline.convert.lora_set import LORA_SUBDIR
from pipeline.core.deployable import MODEL_SUBDIR, OPTIONS_FILE, PYTORCH_BACKEND, read_deployable
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.gpus import get_gpu
from pipeline.k8s.containers import trtllm_serve_pod_command
from pipeline.k8s.inputs import given_bundle
from pipeline.k8s.spec import MODEL_MOUNT, K8sSpec, Serving
from pipeline.core.paths import stage_dir
from pipeline.build.profiles import BuildProfile
from pipeline.render import RenderSpec, render
from pipeline.serve.trtllm_serve import MONITORING_OPTIONS


OPENAI_BUNDLE_STAGE = "bundle-openai"
LLMAPI_MODEL_YAML = Path("tensorrt_llm") / "1" / "model.yaml"


def serving_for(spec: K8sSpec, engine_dir: Path, profile: BuildProfile) -> Serving:
    """What the pods run for this folder (profile: its manifest's, whose backend is pytorch for a
    PyTorch-backend deployable and tensorrt for every engine) and --api; refuses the pairs that cannot work (exit 2)."""
    backend = profile.backend
    if backend != PYTORCH_BACKEND:
        if spec.api == "openai":
            raise InvalidInputError(
                f"--api openai runs trtllm-serve on a PyTorch-backend deployable; {engine_dir} is a TensorRT engine "
                f"(backend {backend}).",
                hint="Render this engine with --api triton (the default), or build a PyTorch-backend deployable "
                "(`pipeline build --backend pytorch --checkpoint <hf-...> --gpu G`) and render that with --api openai.")
        return "ensemble"
    deployable = read_deployable(engine_dir)  # exit 2 without model/ or the options its manifest records
    if spec.api == "triton":
        return "llmapi"
    if deployable.is_cpu or get_gpu(profile.gpu).is_cpu:
        raise UnsupportedError(
            f"--api openai runs trtllm-serve, which needs a GPU; {engine_dir} was built for the CPU.",
            hint="Render it with --api triton (the reference runtime behind the LLM-API contract), or serve it here "
            "with `pipeline serve --api openai` (transformers serve).")
    return "openai"


def read_options(engine_dir: Path) -> dict[str, Any]:
    return dict(read_deployable(engine_dir).options)


def max_batch_size(engine_dir: Path, profile: BuildProfile) -> int:
    """The options' max_batch_size (the autoscaler's in-flight target); checks their parallelism first."""
    options = read_options(engine_dir)
    tp, pp = (int(options.get(key) or 1) for key in ("tensor_parallel_size", "pipeline_parallel_size"))
    if (tp, pp) != (profile.tp, profile.pp):
        raise InvalidInputError(
            f"{Path(engine_dir) / OPTIONS_FILE} asks for tensor_parallel_size {tp} x pipeline_parallel_size {pp}; its "
            f"profile (and so each pod's GPUs) has tp {profile.tp} x pp {profile.pp}.",
            hint="Rebuild the deployable with `pipeline build --backend pytorch` rather than editing its options.")
    value = options.get("max_batch_size")
    return int(value) if isinstance(value, int) and value > 0 else profile.max_batch_size


def llmapi_bundle_for(spec: K8sSpec, engine_dir: Path, profile: BuildProfile) -> Path:
    """The Triton LLM-API repository rendered for /models: --bundle, or `pipeline render`'s (reused
    when its inputs are unchanged) at build/<model>/bundles/<profile-id>/."""
    how = f"Render it with `pipeline render --engine {engine_dir} --model-root {MODEL_MOUNT} --out DIR` and pass --bundle DIR"
    if spec.bundle is not None:
        folder = given_bundle(Path(spec.bundle), engine_dir, profile, how)
    else:
        try:
            folder = render(RenderSpec(engine=engine_dir, model_root=Path(MODEL_MOUNT),
                                       out=stage_dir(profile.model, "bundles", profile.id))).repo
        except InvalidInputError as error:
            raise InvalidInputError(
                f"--api triton serves the Triton LLM-API repository of {engine_dir}; `pipeline render` made none: "
                f"{error.message}",
                hint=f"{how}; or render the manifests with --api openai (trtllm-serve on the deployable itself).") from error
    if not is_llmapi_repo(folder):
        raise InvalidInputError(
            f"{folder} is not a Triton LLM-API repository ({LLMAPI_MODEL_YAML} with backend: pytorch is missing).",
            hint=f"{how}; or use --api openai (trtllm-serve on the deployable itself).")
    return folder


def is_llmapi_repo(folder: Path) -> bool:
    path = Path(folder) / LLMAPI_MODEL_YAML
    try:
        model = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(model, dict) and model.get("backend") == PYTORCH_BACKEND


def serve_options(engine_dir: Path) -> dict[str, Any]:
    """The deployable's options as the pod reads them: paths inside the deployable moved under /models,
    any other absolute path refused, and the monitoring options trtllm-serve needs for /prometheus/metrics."""
    engine_dir = Path(engine_dir).resolve()

    def move(value: Any, key: str) -> Any:
        if isinstance(value, dict):
            return {k: move(v, f"{key}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [move(v, key) for v in value]
        if isinstance(value, str) and value.startswith("/"):
            path = Path(value).resolve()
            if not path.is_relative_to(engine_dir):
                raise InvalidInputError(f"{engine_dir / OPTIONS_FILE}: {key} names {value}, outside the deployable, "
                                        "which the pods cannot read.",
                                        hint="Keep every file the options name inside the deployable folder.")
            return str(Path(MODEL_MOUNT) / path.relative_to(engine_dir))
        return value

    return {**move(read_options(engine_dir), "options"), **MONITORING_OPTIONS}


def openai_bundle_for(spec: K8sSpec, engine_dir: Path, profile: BuildProfile) -> Path:
    """--bundle (checked), or the bundle written (reused when unchanged) at build/<model>/bundles/<id>-openai/."""
    if spec.bundle is None:
        return write_openai_bundle(engine_dir, profile, stage_dir(profile.model, "bundles", f"{profile.id}-openai"))
    folder = Path(spec.bundle).resolve()
    manifest = read_manifest(folder) or {}
    if manifest.get("stage") != OPENAI_BUNDLE_STAGE or (manifest.get("bundle") or {}).get("model_root") != MODEL_MOUNT:
        raise InvalidInputError(f"--bundle {folder} is not a trtllm-serve bundle for {MODEL_MOUNT}.",
                                hint="Leave --bundle out: `pipeline k8s render --api openai` writes it under "
                                "build/<model>/bundles/<profile-id>-openai/.")
    if (manifest.get("profile") or {}) != profile.model_dump(mode="json"):
        raise InvalidInputError(f"--bundle {folder} holds another deployable than profile {profile.id}.",
                                hint="Pass the bundle made from this deployable, or leave --bundle out.")
    return folder


def write_openai_bundle(engine_dir: Path, profile: BuildProfile, out: Path) -> Path:
    """model/ hard-linked from the deployable, the options for the pod, a manifest naming the bundle."""
    started = time.time()
    engine_dir = Path(engine_dir).resolve()
    options = serve_options(engine_dir)
    inputs = {"profile": profile.model_dump(mode="json"), "deployable": tree_identity(engine_dir),
              "options": options, "model_root": MODEL_MOUNT}
    inputs_hash = sha256_json(inputs)
    if reusable(out, inputs_hash):
        return out
    recorded = (read_manifest(engine_dir) or {}).get("files") or {}
    carried = [engine_dir / MODEL_SUBDIR, engine_dir / LORA_SUBDIR]  # the weights, and a --lora build's PEFT adapters
    with atomic_dir(out) as tmp:
        files: dict[str, dict[str, Any]] = {}
        for source in sorted(p for folder in carried for p in folder.rglob("*") if p.is_file()):
            rel = source.relative_to(engine_dir).as_posix()
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            link_or_copy(source, tmp / rel)
            files[rel] = file_record(source, recorded.get(rel))  # hashed once at build: weights are gigabytes
        (tmp / OPTIONS_FILE).write_text(yaml.safe_dump(options, sort_keys=False), encoding="utf-8")
        files[OPTIONS_FILE] = file_record(tmp / OPTIONS_FILE)
        manifest = build_manifest(ArtifactOrigin(OPENAI_BUNDLE_STAGE, inputs, inputs_hash, ("pyyaml",)), tmp, started,
                                  files=files,
                                  extra={"profile": profile.model_dump(mode="json"), "backend": PYTORCH_BACKEND,
                                         "bundle": {"model_root": MODEL_MOUNT, "api": "openai"},
                                         "command": trtllm_serve_pod_command(profile)})
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out

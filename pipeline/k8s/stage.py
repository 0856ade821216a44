"""The stage: `render_k8s(spec)` finds the engine or deployable, gets its bundle, renders the manifests
(render_manifests), validates them and writes the folder atomically, skipping it when nothing changed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.core.artifacts import MANIFEST_NAME, ArtifactOrigin, atomic_dir, build_manifest, reusable, read_manifest, sha256_file, sha256_json
from pipeline.core.deployable import read_deployable
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.gpus import get_gpu
from pipeline.k8s.deploy import deploy_text, dockerfile, next_steps, notes_for
from pipeline.build.speculative import DRAFT_SUBDIR
from pipeline.k8s.inputs import bundle_for, engine_bytes, find_engine, profile_from_engine, python_stub_count
from pipeline.k8s.layout import Ctx, Layout, Served, default_name, one_pod_per_replica, plan_layout
from pipeline.k8s.monitoring import (
    DASHBOARDS,
    SCALING_RULES,
    adapter_config,
    dashboard_configmap,
    data_text,
    hpa,
    pod_monitor,
    prometheus_rule,
)
from pipeline.k8s.output import dump_yaml, kustomization
from pipeline.k8s.pytorch import llmapi_bundle_for, max_batch_size, openai_bundle_for, serving_for
from pipeline.k8s.spec import K8sSpec
from pipeline.k8s.stores import fill_job
from pipeline.k8s.validation import KUBERNETES_VERSION, validate_files
from pipeline.k8s.workloads import lws_extras, pdb, service, service_account, workload
from pipeline.core.paths import stage_dir
from pipeline.build.profiles import BuildProfile
from pipeline.core.versions import TRITON_IMAGE


@dataclass(frozen=True)
class K8sResult:
    out_dir: Path
    profile_id: str
    profile_name: str
    kind: str
    replicas: int
    pods_per_replica: int
    gpus_per_pod: int
    files: tuple[str, ...]
    skipped: bool
    validated_with: str
    notes: tuple[str, ...] = ()
    bundle_dir: Path | None = None
    next_steps: tuple[str, ...] = ()


def render_manifests(profile: BuildProfile, spec: K8sSpec, served: Served | None = None, layout: Layout | None = None,
                     **fields: Any) -> dict[str, list[dict[str, Any]]]:
    """File name -> documents, in the order kustomization.yaml lists them. Pure: writes nothing.
    `served` (or its fields as keywords: size_bytes, bundle_hash, python_stubs, serving, max_batch_size)
    describes the bundle and its server; render_k8s reads them from the engine or deployable folder.
    `layout`: plan_layout(profile, its GPU, spec.gpus_per_node) where the caller has it already."""
    served = replace(served or Served(), **fields)
    gpu = get_gpu(profile.gpu)
    if gpu.is_cpu != (profile.runtime == "reference"):
        raise UnsupportedError(f"Profile {profile.name} pairs runtime {profile.runtime} with GPU {profile.gpu}.",
                               hint="The reference runtime runs on gpu 'cpu'; the tensorrtllm runtime needs a GPU.")
    if not gpu.is_cpu and not gpu.product_label:
        raise UnsupportedError(f"The GPU table has no nvidia.com/gpu.product label for {gpu.key}.",
                               hint="Add its GPU Feature Discovery product label to pipeline/data/gpus.json.")
    spec = spec.node_sized(gpu)
    layout = layout or plan_layout(profile, gpu, spec.gpus_per_node)
    one_pod_per_replica(layout, spec, served.serving)
    ctx = Ctx(profile, gpu, spec, layout, spec.name or default_name(profile, spec.api), served)
    files: dict[str, list[dict[str, Any]]] = {"serviceaccount.yaml": [service_account(ctx)]}
    if ctx.lws:
        files.update(lws_extras(ctx))
    if spec.model_store == "pvc" and spec.bundle_image:
        files["fill-models-job.yaml"] = [fill_job(ctx)]
    files.update({
        ("leaderworkerset.yaml" if ctx.lws else "deployment.yaml"): [workload(ctx)],
        "service.yaml": [service(ctx)],
        "pdb.yaml": [pdb(ctx)],
        "hpa.yaml": [hpa(ctx)],
        "podmonitor.yaml": [pod_monitor(ctx)],
        "prometheusrule.yaml": [prometheus_rule(ctx)],
        "prometheus-adapter-rules.yaml": [adapter_config(ctx)],
        "grafana-dashboard.yaml": [dashboard_configmap(ctx)],
    })
    return files


@lru_cache(maxsize=1)
def _renderer_hash() -> str:
    """The renderer's code and data files: another renderer renders again."""
    code = {path.name: sha256_file(path) for path in sorted(Path(__file__).parent.glob("*.py"))}
    data = {name: sha256_json(data_text(name)) for name in (SCALING_RULES, *DASHBOARDS)}
    return sha256_json({**code, **data})[:16]


def render_k8s(spec: K8sSpec) -> K8sResult:
    """Render, validate and atomically write the manifests for one engine's profile."""
    started = time.time()
    engine_dir = Path(spec.engine_dir).resolve() if spec.engine_dir else find_engine(spec.profile_id or "")
    if not engine_dir.is_dir():
        raise InvalidInputError(f"Engine folder {engine_dir} does not exist.", hint="Run `pipeline build` first or fix --engine.")
    profile = profile_from_engine(engine_dir)
    serving = serving_for(spec, engine_dir, profile)
    gpu = get_gpu(profile.gpu)
    spec = spec.node_sized(gpu)
    layout = plan_layout(profile, gpu, spec.gpus_per_node)
    one_pod_per_replica(layout, spec, serving)  # before any bundle
    size = engine_bytes(engine_dir)  # with a draft-target build's <build>/draft/: the server loads both
    draft = engine_dir / DRAFT_SUBDIR
    draft_size = engine_bytes(draft) if draft.is_dir() else 0
    batch, env = 0, ()
    if serving == "ensemble":
        bundle_dir = bundle_for(spec, engine_dir, profile)
    else:
        batch = max_batch_size(engine_dir, profile)
        env = tuple(sorted(read_deployable(engine_dir).env.items()))
        bundle_dir = (openai_bundle_for if serving == "openai" else llmapi_bundle_for)(
            spec, engine_dir, profile)
    bundle_hash = str((read_manifest(bundle_dir) or {}).get("inputs_hash") or "")
    served = Served(serving=serving, size_bytes=size, bundle_hash=bundle_hash, python_stubs=python_stub_count(bundle_dir),
                    max_batch_size=batch, env=env)
    files = render_manifests(profile, spec, served, layout)
    problems = validate_files(files)
    if problems:  # a bug in the renderer, never the user's input: say exactly what
        raise RuntimeError("Rendered manifests failed validation:\n" + "\n".join(problems))
    out = Path(spec.out).resolve() if spec.out else stage_dir(profile.model, "k8s", profile.id + ("-openai" if serving == "openai" else ""))
    options = spec.model_dump(mode="json", exclude={"out", "force", "profile_id", "engine_dir"})
    inputs = {"profile": profile.model_dump(mode="json"), "spec": options, "bundle": bundle_hash,
              "bundle_dir": str(bundle_dir), "engine_bytes": size, "draft_bytes": draft_size, "triton_image": TRITON_IMAGE, "renderer": _renderer_hash()}
    inputs_hash = sha256_json(inputs)
    names = list(files) + ["kustomization.yaml", "Dockerfile", "DEPLOY.md"]
    steps = next_steps(profile, spec, out, bundle_dir)
    result = K8sResult(out_dir=out, profile_id=profile.id, profile_name=profile.name, kind=layout.kind,
                       replicas=spec.replicas, pods_per_replica=layout.pods_per_replica, gpus_per_pod=layout.gpus_per_pod,
                       files=tuple(names), skipped=True, validated_with=f"kubernetes-validate --strict {KUBERNETES_VERSION}",
                       notes=notes_for(profile, spec, serving), bundle_dir=bundle_dir, next_steps=steps)
    if not spec.force and reusable(out, inputs_hash):
        return result
    with atomic_dir(out) as tmp:
        for name, docs in files.items():
            (tmp / name).write_text(dump_yaml(docs), encoding="utf-8")
        (tmp / "kustomization.yaml").write_text(dump_yaml([kustomization(list(files), spec.namespace)]), encoding="utf-8")
        (tmp / "Dockerfile").write_text(dockerfile(profile, spec, bundle_hash), encoding="utf-8")
        (tmp / "DEPLOY.md").write_text(deploy_text(spec, bundle_dir, steps, result.notes), encoding="utf-8")
        manifest = build_manifest(ArtifactOrigin("k8s", inputs, inputs_hash, ("kubernetes-validate", "pyyaml")), tmp, started,
                                  extra={"engine_dir": str(engine_dir), "bundle_dir": str(bundle_dir), "kind": layout.kind,
                                         "validated_with": result.validated_with, "next_steps": list(steps)})
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return K8sResult(**{**result.__dict__, "skipped": False})

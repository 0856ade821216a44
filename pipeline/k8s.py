"""Kubernetes manifests for one build profile: Triton on GPUs (or the CPU reference runtime).

`render_k8s(spec)` writes `build/<model>/k8s/<profile-id>/`: plain YAML files and a
kustomization.yaml, so `kubectl apply -k DIR` deploys it unchanged. The manifests are built as
Python dicts (no text templates), checked on every render against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict) where the kind is built in, and structurally where it is a CRD
(LeaderWorkerSet, PodMonitor, PrometheusRule; their pod templates are still checked against the
core PodTemplate schema).

Shape:
- world size fits one node (<= gpus_per_node): a Deployment; one pod per replica holds every rank
  (mpirun when world size > 1). Larger: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) with one pod
  per node; the leader runs mpirun across the group, reaching the workers through `kubectl exec`
  as MPI's remote agent (the pattern of NVIDIA's multi-node Triton tutorial).
- the reference runtime (gpu `cpu`) renders too: no GPU resources, node affinity or toleration;
  its image must carry the pipeline's Python dependencies (pass --image). Its container has a CPU
  limit, passed to the runtime as PIPELINE_CPU_LIMIT (downward API) to size its torch threads.
- the model store holds a bundle rendered for /models (pipeline/bundle.py; rendered or reused here
  at build/<model>/bundles/<profile-id>/, or --bundle DIR): every path in its configs starts with
  /models, where every store puts it. Getting it there is generated too: a Dockerfile (FROM the
  pinned Triton image, the bundle at /models; the image store, and the PVC fill Job's source), a Job
  that fills the claim (pvc, with --bundle-image), an init container that syncs the S3 prefix (s3).
  Pods of the pvc and s3 stores start Triton only once /models/manifest.json names the bundle.
- a PyTorch-backend deployable (pipeline build --backend pytorch: model/ + llm_api_options.yaml) has two
  APIs (pipeline/k8s_pytorch.py): `--api triton`, tritonserver on the Triton LLM-API repository
  `pipeline render` makes of it, and `--api openai`, `trtllm-serve` on the deployable itself (probes on
  /health, Prometheus scraping /prometheus/metrics). Same stores, GPU affinity, security context and
  validation; one pod per replica (multi-node PyTorch-backend serving is not rendered).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.artifacts import (
    MANIFEST_NAME,
    atomic_dir,
    build_manifest,
    is_up_to_date,
    read_manifest,
    sha256_file,
    sha256_json,
)
from pipeline.errors import InvalidInputError, UnsupportedError
from pipeline.gpus import GpuSpec, get_gpu
from pipeline.paths import build_root, safe_name, stage_dir
from pipeline.profiles import BuildProfile
from pipeline.versions import TRITON_IMAGE, TRITON_RELEASE

KUBERNETES_VERSION = "1.37.0"
"""The Kubernetes release whose OpenAPI schemas every built-in manifest is validated against."""

AWS_CLI_IMAGE = "docker.io/amazon/aws-cli:2.22.35"
"""Init container that copies the model repository from S3 (any S3-compatible store)."""

HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
PORTS = {"http": HTTP_PORT, "grpc": GRPC_PORT, "metrics": METRICS_PORT}
READY_PATH, LIVE_PATH = "/v2/health/ready", "/v2/health/live"
MODEL_MOUNT = "/models"
RUN_AS = 1000  # the NGC Triton images' `triton-server` user
DRAIN_SECONDS = 15
RATIO_RECORD = "triton:queue_compute_ratio:rate1m"
RATIO_METRIC = "triton_queue_compute_ratio"  # the name prometheus-adapter gives the HPA
HPA_MODEL = "tensorrt_llm"  # the model whose Triton queue feeds the in-flight batcher
ROLE_LABEL = "trtllm-pipeline/role"
PROFILE_LABEL = "trtllm-pipeline/profile-id"
LWS_API = "leaderworkerset.x-k8s.io/v1"
MONITORING_API = "monitoring.coreos.com/v1"

# Triton core metric families the dashboard and rules use (Triton's docs, user_guide/metrics.md).
# The TensorRT-LLM backend's own families are in shared/reference/triton_trtllm_metrics.tsv.
TRITON_CORE_METRICS = frozenset({
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_pending_request_count", "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us",
    "nv_inference_first_response_histogram_ms", "nv_gpu_utilization", "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes", "nv_gpu_power_usage",
})

ModelStore = Literal["pvc", "image", "s3"]
Api = Literal["triton", "openai"]
Serving = Literal["ensemble", "llmapi", "openai"]  # what the pod runs: Triton on an engine, Triton LLM-API, trtllm-serve

# /dev/shm per Python-backend stub: Triton's python backend maps a region of shm-default-byte-size per
# model instance and grows it by shm-growth-byte-size (64 MiB each in older python_backend releases, 1 MiB
# in newer ones: src/python_be.cc, triton-inference-server/python_backend). The larger is budgeted, so the
# memory-backed /dev/shm fits every stub the rendered repository starts whichever release serves it.
PYTHON_STUB_SHM_BYTES = 64 << 20


class K8sSpec(BaseModel):
    """Everything `render_k8s` needs, validated once. Exactly one of profile_id / engine_dir."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile_id: str | None = None
    engine_dir: Path | None = None
    api: Api = Field("triton", description="triton, or openai (trtllm-serve; PyTorch-backend deployables only)")
    name: str | None = Field(None, description="resource name (default: triton-<model>-<id[:8]>, trtllm-serve-... for openai)")
    namespace: str = "default"
    replicas: int = Field(1, ge=1)
    min_replicas: int | None = Field(None, ge=1)
    max_replicas: int | None = Field(None, ge=1)
    model_store: ModelStore = "pvc"
    pvc_name: str | None = None
    s3_uri: str | None = None
    s3_secret: str = "model-store-s3"
    image: str | None = None
    bundle: Path | None = Field(None, description="a bundle rendered with --model-root /models (default: render one)")
    bundle_image: str | None = Field(None, description="pvc: the image built from the generated Dockerfile; a Job copies it into the claim")
    base_image: str | None = Field(None, description="FROM of the generated Dockerfile (default: the pinned Triton image)")
    hf_token_secret: str = "hf-token"
    gpus_per_node: int = Field(8, ge=1, le=64)
    queue_ratio_target: float = Field(1.0, gt=0, description="HPA target: Triton queue time per unit of compute time")
    exit_timeout_s: int = Field(60, ge=1, description="tritonserver --exit-timeout-secs")
    startup_timeout_s: int | None = Field(None, ge=60)
    out: Path | None = None
    force: bool = False

    @model_validator(mode="after")
    def _check(self) -> "K8sSpec":
        if (self.profile_id is None) == (self.engine_dir is None):
            raise InvalidInputError("Give exactly one of --profile ID or --engine DIR.",
                                    hint="`pipeline k8s render --profile <id>` or `--engine build/<model>/engines/<id>`.")
        for what, value in (("--namespace", self.namespace), ("--name", self.name), ("--pvc-name", self.pvc_name),
                            ("--hf-token-secret", self.hf_token_secret), ("--s3-secret", self.s3_secret)):
            if value is not None and not _DNS_LABEL.match(value):
                raise InvalidInputError(f"{what} {value!r} is not a valid Kubernetes name.",
                                        hint="Use lowercase letters, digits and '-', starting with a letter, at most 63 characters.")
        if self.model_store == "s3":
            if not self.s3_uri or not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,62}(/\S*)?$", self.s3_uri):
                raise InvalidInputError(f"--model-store s3 needs --s3-uri s3://BUCKET/PREFIX (got {self.s3_uri!r}).",
                                        hint="Upload the rendered Triton repository and pass its S3 prefix.")
        elif self.s3_uri:
            raise InvalidInputError("--s3-uri is only used with --model-store s3.", hint="Add --model-store s3 or drop --s3-uri.")
        if self.model_store == "image" and not self.image:
            raise InvalidInputError("--model-store image needs --image: an image with the model repository at /models.",
                                    hint=f"Build FROM {TRITON_IMAGE} and COPY the rendered repository to /models.")
        if self.pvc_name and self.model_store != "pvc":
            raise InvalidInputError("--pvc-name is only used with --model-store pvc.", hint="Drop --pvc-name or use --model-store pvc.")
        if self.bundle_image and self.model_store != "pvc":
            raise InvalidInputError("--bundle-image is only used with --model-store pvc (the Job that fills the claim).",
                                    hint="With --model-store image, --image is the image built from the generated Dockerfile.")
        for what, value in (("--image", self.image), ("--bundle-image", self.bundle_image), ("--base-image", self.base_image)):
            if value is not None and not _IMAGE_REF.match(value):
                raise InvalidInputError(f"{what} {value!r} is not an image reference.",
                                        hint="e.g. registry.example.com/team/llm-models:2026-12-01")
        low, high = self.hpa_bounds
        if not low <= self.replicas <= high:
            raise InvalidInputError(
                f"--replicas {self.replicas} is outside the autoscaler's range {low}..{high}.",
                hint="Pick --min-replicas <= --replicas <= --max-replicas.")
        return self

    @property
    def hpa_bounds(self) -> tuple[int, int]:
        low = self.min_replicas if self.min_replicas is not None else self.replicas
        high = self.max_replicas if self.max_replicas is not None else max(low, self.replicas, 4)
        if low > high:
            raise InvalidInputError(f"--min-replicas {low} is larger than --max-replicas {high}.",
                                    hint="Swap them or raise --max-replicas.")
        return low, high


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*[a-zA-Z0-9_]$")


@dataclass(frozen=True)
class Layout:
    """How a profile's ranks map onto pods."""

    kind: Literal["Deployment", "LeaderWorkerSet"]
    world_size: int
    pods_per_replica: int
    gpus_per_pod: int  # 0 on the CPU reference runtime


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


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def profile_from_engine(engine_dir: Path) -> BuildProfile:
    """The BuildProfile recorded in an engine folder's manifest.json ({"profile": {...}})."""
    engine_dir = Path(engine_dir)
    manifest = read_manifest(engine_dir)
    if manifest is None:
        raise InvalidInputError(f"{engine_dir} has no readable {MANIFEST_NAME}: it is not an engine folder.",
                                hint="Pass a folder made by `pipeline build` (build/<model>/engines/<profile-id>/).")
    raw = manifest.get("profile") or (manifest.get("inputs") or {}).get("profile")
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{engine_dir / MANIFEST_NAME} records no build profile.",
                                hint="Rebuild the engine with `pipeline build`; its manifest carries the profile.")
    try:
        return BuildProfile(**raw)
    except ValidationError as error:
        raise InvalidInputError(f"The profile in {engine_dir / MANIFEST_NAME} is invalid: {error.errors()[0]['msg']}.",
                                hint="Rebuild the engine with this version of the pipeline.") from error


def find_engine(profile_id: str, root: Path | None = None) -> Path:
    """The engine folder build/*/engines/<profile_id>/ (an id, or a profile's readable name)."""
    root = (root or build_root())
    key = profile_id.strip()
    candidates = sorted(p.parent for p in root.glob(f"*/engines/{safe_name(key, what='profile id')}/{MANIFEST_NAME}"))
    if not candidates:  # a readable name such as trtllm-h100-sxm-fp8-tp1-throughput
        for manifest in sorted(root.glob(f"*/engines/*/{MANIFEST_NAME}")):
            try:
                if profile_from_engine(manifest.parent).name == key:
                    candidates.append(manifest.parent)
            except InvalidInputError:
                continue
    if len(candidates) == 1:
        return candidates[0]
    known = sorted(p.parent.name for p in root.glob(f"*/engines/*/{MANIFEST_NAME}"))
    if not candidates:
        raise InvalidInputError(f"No engine for profile {key!r} under {root}.",
                                hint=f"Known profile ids: {', '.join(known) or 'none (run `pipeline build` first)'}; "
                                "or pass --engine DIR.")
    raise InvalidInputError(f"Profile {key!r} matches {len(candidates)} engines: {', '.join(map(str, candidates))}.",
                            hint="Pass the profile id, or --engine DIR.")


def engine_bytes(engine_dir: Path) -> int:
    """Bytes of every file in the engine folder (links followed: the reference runtime links its checkpoint)."""
    total = 0
    for folder, _dirs, files in os.walk(engine_dir, followlinks=True):
        for name in files:
            if name == MANIFEST_NAME:
                continue
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def plan_layout(profile: BuildProfile, gpu: GpuSpec, gpus_per_node: int) -> Layout:
    """One pod when the world fits a node; otherwise one full node per pod in a LeaderWorkerSet."""
    world = profile.world_size
    if gpu.is_cpu or profile.runtime == "reference":
        if world != 1:
            raise UnsupportedError(f"The reference runtime runs one process on the CPU; this profile has world size {world}.",
                                   hint="Render a reference profile with --tp 1 --pp 1, or a GPU profile.")
        return Layout("Deployment", 1, 1, 0)
    if world <= gpus_per_node:
        return Layout("Deployment", world, 1, world)
    if world % gpus_per_node:
        raise UnsupportedError(
            f"World size {world} (tp {profile.tp} x pp {profile.pp}) does not fill whole nodes of {gpus_per_node} GPUs.",
            hint="TensorRT-LLM maps rank r to GPU r % gpus_per_node, so multi-node engines use full nodes: "
            f"build with a world size that is a multiple of {gpus_per_node}, or pass the real --gpus-per-node.")
    return Layout("LeaderWorkerSet", world, world // gpus_per_node, gpus_per_node)


def one_pod_per_replica(layout: Layout, spec: K8sSpec, serving: Serving) -> None:
    """PyTorch-backend deployables are rendered for one pod per replica (no multi-node LLM API here)."""
    if serving != "ensemble" and layout.kind != "Deployment":
        raise UnsupportedError(
            f"World size {layout.world_size} spans {layout.pods_per_replica} nodes; PyTorch-backend deployables are "
            "rendered for one pod per replica.",
            hint=f"Build it with tp x pp <= --gpus-per-node ({spec.gpus_per_node}), or serve this world size as an engine "
            "(`pipeline build --backend tensorrt`), which renders as a LeaderWorkerSet.")


# ---------------------------------------------------------------------------------------------
# Manifests
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    profile: BuildProfile
    gpu: GpuSpec
    spec: K8sSpec
    layout: Layout
    name: str
    engine_bytes: int
    bundle_hash: str = ""
    python_stubs: int = 0
    serving: Serving = "ensemble"
    max_batch_size: int = 0  # the LLM-API options' (llmapi: the in-flight target of the autoscaler)

    @property
    def openai(self) -> bool:
        return self.serving == "openai"

    @property
    def container(self) -> str:
        return "trtllm-serve" if self.openai else "triton"

    @property
    def ports(self) -> dict[str, int]:
        return {"http": HTTP_PORT} if self.openai else dict(PORTS)

    @property
    def ns(self) -> str:
        return self.spec.namespace

    @property
    def cpu(self) -> bool:
        return self.layout.gpus_per_pod == 0

    @property
    def lws(self) -> bool:
        return self.layout.kind == "LeaderWorkerSet"

    @property
    def selector(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.container, "app.kubernetes.io/instance": self.name}

    @property
    def serving_selector(self) -> dict[str, str]:
        """Pods that answer HTTP/gRPC and export metrics (only the leader of a LeaderWorkerSet)."""
        return {**self.selector, ROLE_LABEL: "leader"} if self.lws else self.selector

    @property
    def labels(self) -> dict[str, str]:
        return {**self.selector, "app.kubernetes.io/component": "inference", "app.kubernetes.io/part-of": "trtllm-pipeline",
                "app.kubernetes.io/version": TRITON_RELEASE, PROFILE_LABEL: self.profile.id}

    @property
    def job(self) -> str:
        """The `job` label prometheus-operator gives PodMonitor targets: <namespace>/<podmonitor name>."""
        return f"{self.ns}/{self.name}"

    def meta(self, name: str | None = None, **extra: Any) -> dict[str, Any]:
        return {"name": name or self.name, "namespace": self.ns, "labels": dict(self.labels), **extra}


def default_name(profile: BuildProfile, api: Api = "triton") -> str:
    model = re.sub(r"[^a-z0-9-]+", "-", profile.model.lower()).strip("-")[:30].rstrip("-")
    prefix = "trtllm-serve" if api == "openai" else "triton"
    return f"{prefix}-{model}-{profile.id[:8]}" if model else f"{prefix}-{profile.id[:8]}"


def _quantity_gib(gib: float) -> str:
    return f"{max(1, math.ceil(gib))}Gi"


def _milli(value: float) -> str:
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _sizing(ctx: _Ctx) -> dict[str, Any]:
    """CPU, memory, /dev/shm and startup budget from the profile and the engine's size.

    Each rank deserializes its engine in host memory before copying it to the GPU, so a pod needs its
    share of the engine (x1.25) plus a base for Triton, tokenizers and MPI. The reference runtime keeps
    the whole checkpoint in RAM (fp32 plus transformers' working copies: x2.5)."""
    gib = 1 << 30
    share = ctx.engine_bytes / ctx.layout.pods_per_replica / gib
    # every Python-backend instance (stub process) maps its own /dev/shm region
    stubs_gib = ctx.python_stubs * PYTHON_STUB_SHM_BYTES / gib
    if ctx.cpu:
        cpu, memory, shm = 4, 4 + 2.5 * share, math.ceil(1 + stubs_gib)
    else:
        g = ctx.layout.gpus_per_pod
        cpu, memory, shm = 2 + 2 * g, 6 + 2 * g + 1.25 * share, math.ceil(1 + g + stubs_gib)
    startup = ctx.spec.startup_timeout_s or int(min(3600, max(600, 300 + 10 * share)))
    return {"cpu": str(cpu), "memory_gib": math.ceil(memory), "shm_gib": shm, "startup_s": startup,
            "model_volume_gib": math.ceil(share * 1.25 + 2)}


def _tritonserver_args(ctx: _Ctx) -> list[str]:
    return [f"--exit-timeout-secs={ctx.spec.exit_timeout_s}", "--metrics-config=histogram_latencies=true",
            "--allow-cpu-metrics=true", f"--allow-gpu-metrics={'false' if ctx.cpu else 'true'}"]


def server_command(ctx: _Ctx) -> list[str]:
    """The container command: tritonserver, or one rank per GPU under mpirun.

    Reuses pipeline.commands' builders (the same flags as tensorrtllm_backend's
    launch_triton_server.py) with the ports and repository of the pod."""
    from pipeline.commands import TritonLaunch, mpirun_command, tritonserver_command

    if ctx.openai:
        from pipeline.k8s_pytorch import openai_command

        return openai_command(ctx)
    spec = TritonLaunch(repo=Path(MODEL_MOUNT), http_port=HTTP_PORT, grpc_port=GRPC_PORT, metrics_port=METRICS_PORT,
                      world_size=ctx.layout.world_size, extra_args=tuple(_tritonserver_args(ctx)))
    if ctx.layout.world_size == 1 or ctx.serving == "llmapi":  # the LLM API starts its own workers
        return tritonserver_command(spec, "tritonserver")
    command = mpirun_command(spec, "tritonserver")
    if ctx.lws:
        hosts = ",".join(["$(POD_NAME)"] + [f"$(POD_NAME)-{i}" for i in range(1, ctx.layout.pods_per_replica)])
        slots = ",".join(f"{h}:{ctx.layout.gpus_per_pod}" for h in hosts.split(","))
        launcher = ["/bin/sh", "/opt/pipeline/lws-leader.sh"]
        command = launcher + command[:2] + ["--host", slots, "--mca", "plm_rsh_agent", "/opt/pipeline/kubexec.sh"] + command[2:]
    return command


def _security(read_only: bool = True) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": read_only,
            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def _pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _env(ctx: _Ctx) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "HF_HOME", "value": "/tmp/hf"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ctx.spec.hf_token_secret, "key": "HF_TOKEN", "optional": True}}},
    ]
    if ctx.lws:
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    if ctx.cpu:  # the reference runtime sizes its torch threads from this, not from the node's cores
        env.append({"name": "PIPELINE_CPU_LIMIT", "valueFrom": {"resourceFieldRef": {
            "containerName": ctx.container, "resource": "limits.cpu", "divisor": "1"}}})
    return env


def _volumes(ctx: _Ctx, sizing: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{sizing['shm_gib']}Gi"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "16Gi"}},
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
    store = ctx.spec.model_store
    if store == "pvc":
        claim = ctx.spec.pvc_name or f"{ctx.name}-models"
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        mounts.append({"name": "models", "mountPath": MODEL_MOUNT, "readOnly": True})
    elif store == "s3":
        volumes.append({"name": "models", "emptyDir": {"sizeLimit": f"{sizing['model_volume_gib']}Gi"}})
        mounts.append({"name": "models", "mountPath": MODEL_MOUNT, "readOnly": True})
    if ctx.lws:
        volumes.append({"name": "launcher", "configMap": {"name": f"{ctx.name}-mpi-launcher", "defaultMode": 0o555}})
        mounts.append({"name": "launcher", "mountPath": "/opt/pipeline", "readOnly": True})
    return volumes, mounts


# A bundle is complete where its manifest.json names it: the fill Job copies that file last.
_HAS_BUNDLE = 'grep -q "\\"inputs_hash\\": \\"$3\\"" "$2/manifest.json" 2>/dev/null'
_SYNC_SH = f"""\
aws s3 sync --only-show-errors --no-progress "$1" "$2"
if ! {_HAS_BUNDLE}; then
  echo "$1 does not hold bundle $3 (upload it with: aws s3 sync <bundle dir> $1 --delete)" >&2
  exit 1
fi
"""
_WAIT_SH = f"""\
until {_HAS_BUNDLE}; do
  echo "waiting for bundle $3 in $2 (the fill Job copies it; see the k8s folder's DEPLOY.md)"
  sleep 10
done
"""
_FILL_SH = f"""\
set -eu
if {_HAS_BUNDLE}; then
  echo "bundle $3 is already in the claim"
  exit 0
fi
rm -f "$2/manifest.json"
find "$2" -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {{}} +
cd "$1"
find . -mindepth 1 -maxdepth 1 ! -name manifest.json -exec cp -R {{}} "$2/" \\;
cp manifest.json "$2/manifest.json"
echo "bundle $3 copied into the claim"
"""


def _bundle_script(name: str, script: str, source: str, target: str, ctx: _Ctx) -> list[str]:
    return ["/bin/sh", "-c", script, name, source, target, ctx.bundle_hash]


def _fetch_container(ctx: _Ctx) -> dict[str, Any]:
    """Init container: sync the bundle from S3 into the pod's models volume; fail unless it is complete."""
    secret = ctx.spec.s3_secret
    env = [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}
           for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")]
    env.append({"name": "HOME", "value": "/tmp"})
    return {
        "name": "fetch-model-repository",
        "image": AWS_CLI_IMAGE,
        "command": _bundle_script("fetch-model-repository", _SYNC_SH, str(ctx.spec.s3_uri), MODEL_MOUNT, ctx),
        "env": env,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "securityContext": _security(),
        "volumeMounts": [{"name": "models", "mountPath": MODEL_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def _wait_container(ctx: _Ctx) -> dict[str, Any]:
    """Init container (pvc): start Triton only once the claim holds the complete bundle."""
    return {
        "name": "wait-for-bundle",
        "image": ctx.spec.image or TRITON_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": _bundle_script("wait-for-bundle", _WAIT_SH, "-", MODEL_MOUNT, ctx),
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": _security(),
        "volumeMounts": [{"name": "models", "mountPath": MODEL_MOUNT, "readOnly": True}, {"name": "tmp", "mountPath": "/tmp"}],
    }


def _fill_job(ctx: _Ctx) -> dict[str, Any]:
    """Job (pvc): copy the bundle from the image built by the generated Dockerfile into the claim.
    Named after the bundle, so a new bundle is a new Job (a Job's pod template cannot change)."""
    claim = ctx.spec.pvc_name or f"{ctx.name}-models"
    meta = ctx.meta(f"{ctx.name}-fill-{ctx.bundle_hash[:10]}")
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
        "backoffLimit": 3, "ttlSecondsAfterFinished": 7 * 24 * 3600,
        # labels of their own: the serving selectors (Deployment, Service, PDB, PodMonitor) must not match it
        "template": {"metadata": {"labels": {**ctx.labels, "app.kubernetes.io/name": "triton-bundle-fill",
                                             "app.kubernetes.io/component": "fill-models"}}, "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": _pod_security(),
            "containers": [{
                "name": "fill-models",
                "image": ctx.spec.bundle_image,
                "imagePullPolicy": "IfNotPresent",
                "command": _bundle_script("fill-models", _FILL_SH, MODEL_MOUNT, "/target", ctx),
                "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                "securityContext": _security(),
                "volumeMounts": [{"name": "target", "mountPath": "/target"}, {"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "target", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
        }},
    }}


def _triton_container(ctx: _Ctx, sizing: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    startup_period = 10
    memory = sizing["memory_gib"]
    resources: dict[str, Any] = {
        "requests": {"cpu": sizing["cpu"], "memory": f"{memory}Gi"},
        # the memory-backed /dev/shm is charged to the container: the limit leaves room for it
        "limits": {"memory": f"{memory + sizing['shm_gib']}Gi"},
    }
    if not ctx.cpu:
        gpus = str(ctx.layout.gpus_per_pod)
        resources["requests"]["nvidia.com/gpu"] = gpus
        resources["limits"]["nvidia.com/gpu"] = gpus
    else:  # the runtime reads this limit (PIPELINE_CPU_LIMIT) to size its threads
        resources["limits"]["cpu"] = sizing["cpu"]
    probe = {"port": "http"}
    ready, live = probe_paths(ctx)
    return {
        "name": ctx.container,
        "image": ctx.spec.image or TRITON_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": server_command(ctx),
        "env": _env(ctx),
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ctx.ports.items()],
        "resources": resources,
        "startupProbe": {"httpGet": {"path": ready, **probe}, "periodSeconds": startup_period,
                         "failureThreshold": math.ceil(sizing["startup_s"] / startup_period), "timeoutSeconds": 5},
        "readinessProbe": {"httpGet": {"path": ready, **probe}, "periodSeconds": 5, "failureThreshold": 3,
                           "timeoutSeconds": 5},
        "livenessProbe": {"httpGet": {"path": live, **probe}, "periodSeconds": 10, "failureThreshold": 6,
                          "timeoutSeconds": 5},
        # keep serving while endpoints drop this pod, then SIGTERM lets Triton finish in-flight requests
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {DRAIN_SECONDS}"]}}},
        "securityContext": _security(),
        "volumeMounts": mounts,
    }


def probe_paths(ctx: _Ctx) -> tuple[str, str]:
    """(readiness/startup, liveness) HTTP paths: Triton's health API, or trtllm-serve's /health."""
    if ctx.openai:
        from pipeline.trtllm_serve import HEALTH_PATH

        return HEALTH_PATH, HEALTH_PATH
    return READY_PATH, LIVE_PATH


def _worker_container(ctx: _Ctx, sizing: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """A LeaderWorkerSet worker: idles until the leader's mpirun starts ranks in it via kubectl exec."""
    container = _triton_container(ctx, sizing, mounts)
    container["command"] = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done"]
    for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
        container.pop(key)
    return container


def _affinity(ctx: _Ctx) -> dict[str, Any] | None:
    if ctx.cpu:
        return None
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": [ctx.gpu.product_label]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "labelSelector": {"matchLabels": dict(ctx.serving_selector)}, "topologyKey": "kubernetes.io/hostname"}}]},
    }


def _pod_spec(ctx: _Ctx, role: Literal["single", "leader", "worker"]) -> dict[str, Any]:
    sizing = _sizing(ctx)
    volumes, mounts = _volumes(ctx, sizing)
    container = _worker_container(ctx, sizing, mounts) if role == "worker" else _triton_container(ctx, sizing, mounts)
    spec: dict[str, Any] = {
        "serviceAccountName": ctx.name,
        "automountServiceAccountToken": role == "leader",  # only the leader calls the API (kubectl exec)
        "securityContext": _pod_security(),
        "terminationGracePeriodSeconds": ctx.spec.exit_timeout_s + DRAIN_SECONDS + 15,
        "containers": [container],
        "volumes": volumes,
    }
    if ctx.spec.model_store == "s3":
        spec["initContainers"] = [_fetch_container(ctx)]
    elif ctx.spec.model_store == "pvc":
        spec["initContainers"] = [_wait_container(ctx)]
    affinity = _affinity(ctx)
    if affinity:
        spec["affinity"] = affinity
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return spec


CPU_IMAGE_NOTE = ("the reference runtime's Python backend imports torch, transformers and this pipeline: "
                  "serve it from an image that has them (--image, e.g. the project's Dockerfile image)")


def notes_for(profile: BuildProfile, spec: K8sSpec, serving: Serving = "ensemble") -> tuple[str, ...]:
    """What a user must know before applying these manifests."""
    notes = []
    if serving == "openai":
        notes.append("trtllm-serve exports Prometheus metrics at /prometheus/metrics only with the LLM-API option "
                     "return_perf_metrics: true; the bundle's llm_api_options.yaml sets it (the deployable's is unchanged)")
    if serving == "llmapi":
        notes.append("the Triton LLM-API model exports Triton's core metrics only (no nv_trt_llm_* families): the "
                     "autoscaler reads requests in flight per pod against the options' max_batch_size")
    if profile.runtime == "reference" and not spec.image:
        notes.append(f"{CPU_IMAGE_NOTE}; the default {TRITON_IMAGE} does not carry the pipeline")
    if profile.runtime == "reference" and spec.model_store in ("image", "pvc") and not spec.base_image:
        notes.append(f"the generated Dockerfile builds FROM {TRITON_IMAGE}; for the reference runtime's image pass "
                     "--base-image <an image with the pipeline> (the project's Dockerfile image)")
    if profile.world_size > spec.gpus_per_node:
        notes.append("multi-node: the serving image needs kubectl (mpirun reaches the worker pods through "
                     "`kubectl exec`) and the LeaderWorkerSet controller must be installed")
    if spec.model_store == "pvc":
        notes.append(f"the PersistentVolumeClaim {spec.pvc_name or '<name>-models'} (ReadWriteMany for more than one "
                     "replica) is not created here; pods wait until it holds the bundle at its root")
        if not spec.bundle_image:
            notes.append("no --bundle-image: no Job fills the claim; build the image from the generated Dockerfile and "
                         "render again with --bundle-image REF, or copy the bundle to the claim's root yourself "
                         "(manifest.json last)")
    return tuple(notes)


def dockerfile(profile: BuildProfile, spec: K8sSpec, bundle_hash: str) -> str:
    """The image that carries the bundle at /models: the model store `image` serves it, the pvc fill Job
    copies from it. Built with the bundle folder as the context (see DEPLOY.md)."""
    base = spec.base_image or TRITON_IMAGE
    return f"""\
# syntax=docker/dockerfile:1
# {profile.name} ({profile.id}): the bundle rendered for {MODEL_MOUNT}, on {base}.
# Every path in the bundle's configs starts with {MODEL_MOUNT}. Build with the bundle folder as the context:
#   docker build -f Dockerfile -t IMAGE <bundle folder>
FROM {base}
LABEL org.opencontainers.image.title="{profile.model} {profile.name}" \\
      trtllm-pipeline.profile-id="{profile.id}" \\
      trtllm-pipeline.bundle="{bundle_hash}"
COPY . {MODEL_MOUNT}/
"""


def next_steps(spec: K8sSpec, out: Path, bundle_dir: Path) -> tuple[str, ...]:
    """The commands that put the bundle in the model store and deploy (printed, and in DEPLOY.md)."""
    build = f"docker build -f {out / 'Dockerfile'} -t {{image}} {bundle_dir} && docker push {{image}}"
    apply = f"kubectl apply -k {out}"
    if spec.model_store == "image":
        return (build.format(image=spec.image), apply)
    if spec.model_store == "s3":
        return (f"aws s3 sync {bundle_dir} {spec.s3_uri} --delete", apply)
    if spec.bundle_image:
        return (build.format(image=spec.bundle_image), f"{apply}   # the Job fills the claim; pods wait for it")
    return (f"copy {bundle_dir}/ to the root of the claim {spec.pvc_name or '<name>-models'}, manifest.json last",
            f"{apply}   # pods wait until the claim holds the bundle")


def _annotations(ctx: _Ctx) -> dict[str, str]:
    notes = {"trtllm-pipeline/image-note": CPU_IMAGE_NOTE} if ctx.cpu else {}
    return {"trtllm-pipeline/profile-name": ctx.profile.name, "trtllm-pipeline/model": ctx.profile.model,
            "trtllm-pipeline/gpu": ctx.profile.gpu, "trtllm-pipeline/world-size": str(ctx.layout.world_size), **notes}


def _workload(ctx: _Ctx) -> dict[str, Any]:
    if not ctx.lws:
        return {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": ctx.meta(annotations=_annotations(ctx)),
            "spec": {
                "replicas": ctx.spec.replicas,
                "selector": {"matchLabels": dict(ctx.selector)},
                # a GPU pod is never taken down before its replacement is ready
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": {"metadata": {"labels": dict(ctx.labels), "annotations": _annotations(ctx)},
                             "spec": _pod_spec(ctx, "single")},
            },
        }
    return {
        "apiVersion": LWS_API, "kind": "LeaderWorkerSet",
        "metadata": ctx.meta(annotations=_annotations(ctx)),
        "spec": {
            "replicas": ctx.spec.replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": ctx.layout.pods_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": {**ctx.labels, ROLE_LABEL: "leader"}, "annotations": _annotations(ctx)},
                                   "spec": _pod_spec(ctx, "leader")},
                "workerTemplate": {"metadata": {"labels": {**ctx.labels, ROLE_LABEL: "worker"}, "annotations": _annotations(ctx)},
                                   "spec": _pod_spec(ctx, "worker")},
            },
        },
    }


_LWS_LEADER_SH = """\
#!/bin/sh
# Wait until every worker pod of this group runs, then exec the mpirun command given as arguments.
set -eu
group_size="${LWS_GROUP_SIZE:?not set by LeaderWorkerSet}"
i=1
while [ "$i" -lt "$group_size" ]; do
  until kubectl wait --for=condition=Ready "pod/${POD_NAME}-${i}" --timeout=60s >/dev/null 2>&1; do
    echo "waiting for worker ${POD_NAME}-${i}"
    sleep 2
  done
  i=$((i + 1))
done
exec "$@"
"""

_KUBEXEC_SH = """\
#!/bin/sh
# MPI remote agent: mpirun calls `kubexec.sh <pod> <command...>`; run it in that pod's triton container.
pod="$1"
shift
exec kubectl exec -i "$pod" -c triton -- /bin/sh -c "$*"
"""


def _lws_extras(ctx: _Ctx) -> dict[str, list[dict[str, Any]]]:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": ctx.meta(),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": ctx.meta(),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ctx.name},
               "subjects": [{"kind": "ServiceAccount", "name": ctx.name, "namespace": ctx.ns}]}
    launcher = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ctx.meta(f"{ctx.name}-mpi-launcher"),
                "data": {"lws-leader.sh": _LWS_LEADER_SH, "kubexec.sh": _KUBEXEC_SH}}
    return {"rbac.yaml": [role, binding], "mpi-launcher.yaml": [launcher]}


def _service(ctx: _Ctx) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": ctx.meta(),
            "spec": {"type": "ClusterIP", "selector": dict(ctx.serving_selector),
                     "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ctx.ports.items()]}}


def _sel(ctx: _Ctx, model: str | None = None, extra: str = "") -> str:
    parts = [f'namespace="{ctx.ns}"', f'job="{ctx.job}"']
    if model:
        parts.append(f'model=~"{model}"' if "|" in model else f'model="{model}"')
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}"


def ratio_expr(ctx: _Ctx) -> str:
    sel = _sel(ctx, HPA_MODEL)
    # clamp_min keeps an idle pod at 0 instead of 0/0 = NaN (queue time is 0 whenever compute is)
    return (f"sum by (namespace, pod) (rate(nv_inference_queue_duration_us{sel}[1m]))\n"
            f"/ clamp_min(sum by (namespace, pod) (rate(nv_inference_compute_infer_duration_us{sel}[1m])), 1)")


@dataclass(frozen=True)
class Scaling:
    """What the autoscaler reads: a recorded per-pod series, its adapter name, and the target per pod."""

    record: str
    metric: str
    expr: str
    target: str


def scaling(ctx: _Ctx) -> Scaling:
    if ctx.serving != "ensemble":
        from pipeline.k8s_pytorch import pytorch_scaling

        return pytorch_scaling(ctx)
    return Scaling(RATIO_RECORD, RATIO_METRIC, ratio_expr(ctx), _milli(ctx.spec.queue_ratio_target))


def metrics_endpoint(ctx: _Ctx) -> dict[str, str]:
    """Where Prometheus scrapes a serving pod: Triton's metrics port, or trtllm-serve's HTTP port."""
    if ctx.openai:
        from pipeline.trtllm_serve import PROMETHEUS_PATH

        return {"port": "http", "path": PROMETHEUS_PATH}
    return {"port": "metrics", "path": "/metrics"}


def _pod_monitor(ctx: _Ctx) -> dict[str, Any]:
    return {"apiVersion": MONITORING_API, "kind": "PodMonitor", "metadata": ctx.meta(),
            "spec": {"selector": {"matchLabels": dict(ctx.serving_selector)},
                     "podMetricsEndpoints": [{**metrics_endpoint(ctx), "interval": "15s"}]}}


def _prometheus_rule(ctx: _Ctx) -> dict[str, Any]:
    scale = scaling(ctx)
    return {"apiVersion": MONITORING_API, "kind": "PrometheusRule", "metadata": ctx.meta(),
            "spec": {"groups": [{"name": f"{ctx.name}.rules", "interval": "15s", "rules": [
                {"record": scale.record, "expr": scale.expr,
                 "labels": {"deployment": ctx.name}},
            ]}]}}


def _adapter_config(ctx: _Ctx) -> dict[str, Any]:
    """prometheus-adapter rule exposing the recorded series as the per-pod custom metric the HPA reads."""
    scale = scaling(ctx)
    rules = {"rules": [{
        "seriesQuery": f'{scale.record}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{re.escape(scale.record)}$", "as": scale.metric},
        "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
    }]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ctx.meta(f"{ctx.name}-prometheus-adapter-rules"),
            "data": {"config.yaml": yaml.safe_dump(rules, sort_keys=False)}}


def _hpa(ctx: _Ctx) -> dict[str, Any]:
    low, high = ctx.spec.hpa_bounds
    target = ({"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": ctx.name} if ctx.lws
              else {"apiVersion": "apps/v1", "kind": "Deployment", "name": ctx.name})
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": ctx.meta(),
            "spec": {"scaleTargetRef": target, "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": scaling(ctx).metric},
                                                           "target": {"type": "AverageValue",
                                                                      "averageValue": scaling(ctx).target}}}],
                     # engines take minutes to load: add one replica at a time, remove slowly
                     "behavior": {"scaleUp": {"stabilizationWindowSeconds": 60,
                                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}]},
                                  "scaleDown": {"stabilizationWindowSeconds": 600,
                                                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]}}}}


def _pdb(ctx: _Ctx) -> dict[str, Any]:
    # maxUnavailable (not minAvailable) so that a single replica never blocks a node drain forever
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": ctx.meta(),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(ctx.selector)}}}


def _service_account(ctx: _Ctx) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ctx.meta(), "automountServiceAccountToken": False}


def dashboard(ctx: _Ctx) -> dict[str, Any]:
    """Grafana dashboard: what operators of an LLM endpoint watch.

    TTFT comes from Triton's nv_inference_first_response_histogram_ms (decoupled models, enabled by
    --metrics-config=histogram_latencies=true; it times the first streamed response). Neither Triton
    nor the TensorRT-LLM backend exports time per output token: the panel derives the mean from
    request duration minus first-response time over output tokens (nv_llm_output_token_len)."""
    entry = "ensemble|tensorrt_llm_bls"
    trt = _sel(ctx, HPA_MODEL)
    ttft = "nv_inference_first_response_histogram_ms_bucket" + _sel(ctx, entry)
    tpot = (f"(sum(rate(nv_inference_request_duration_us{trt}[5m])) / 1000"
            f" - sum(rate(nv_inference_first_response_histogram_ms_sum{trt}[5m])))"
            f" / clamp_min(sum(rate(nv_llm_output_token_len_sum{trt}[5m])) - sum(rate(nv_llm_output_token_len_count{trt}[5m])), 1)")
    all_models = _sel(ctx)
    per_request = f"clamp_min(sum by (model) (rate(nv_inference_request_success{all_models}[5m])), 1e-9)"
    in_flight = _sel(ctx, None, 'request_type=~"active|scheduled|context|waiting"')
    kv_blocks = _sel(ctx, None, 'kv_cache_block_type=~"used|free|max"')
    runtime_gpu = _sel(ctx, None, 'memory_type="gpu"')
    panels = [
        panel(1, "Time to first token (first streamed response)", "ms", [
            (f"histogram_quantile(0.5, sum by (le, model) (rate({ttft}[5m])))", "p50 {{model}}"),
            (f"histogram_quantile(0.99, sum by (le, model) (rate({ttft}[5m])))", "p99 {{model}}")], 0, 0,
            "nv_inference_first_response_histogram_ms (needs --metrics-config=histogram_latencies=true)."),
        panel(2, "Time per output token (mean, derived)", "ms", [(tpot, "mean TPOT")], 12, 0,
              "Not exported by Triton or TensorRT-LLM: (request duration - first response) / (output tokens - 1 per request)."),
        panel(3, "Queue vs compute time per request", "µs", [
            (f"sum by (model) (rate(nv_inference_queue_duration_us{all_models}[5m])) / {per_request}",
             "queue {{model}}"),
            (f"sum by (model) (rate(nv_inference_compute_infer_duration_us{all_models}[5m])) / {per_request}",
             "compute {{model}}"),
            (f'{RATIO_RECORD}{{namespace="{ctx.ns}",deployment="{ctx.name}"}}', "queue:compute {{pod}}")], 0, 8,
              "The HPA scales on the queue:compute ratio of the tensorrt_llm model."),
        panel(4, "Requests in flight", "short", [
            (f"sum by (request_type) (nv_trt_llm_request_metrics{in_flight})",
             "{{request_type}}"),
            (f"sum(nv_inference_pending_request_count{all_models})", "Triton pending")], 12, 8),
        panel(5, "KV-cache blocks", "short", [
            (f"sum by (kv_cache_block_type) (nv_trt_llm_kv_cache_block_metrics{kv_blocks})",
             "{{kv_cache_block_type}}")], 0, 16),
        panel(6, "GPU memory", "bytes", [
            (f"sum by (gpu_uuid) (nv_gpu_memory_used_bytes{all_models})", "used {{gpu_uuid}}"),
            (f"sum by (gpu_uuid) (nv_gpu_memory_total_bytes{all_models})", "total {{gpu_uuid}}"),
            (f"sum by (pod) (nv_trt_llm_runtime_memory_metrics{runtime_gpu})",
             "TensorRT-LLM runtime {{pod}}")], 12, 16),
    ]
    return dashboard_frame(ctx, f"Triton {ctx.profile.model} ({ctx.profile.name})", ["triton"], panels)


def panel(pid: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int, desc: str = "") -> dict[str, Any]:
    """One Grafana timeseries panel on the Prometheus datasource variable."""
    return {"id": pid, "type": "timeseries", "title": title, "description": desc,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(65 + i), "expr": expr, "legendFormat": legend}
                        for i, (expr, legend) in enumerate(targets)]}


def dashboard_frame(ctx: _Ctx, title: str, tags: list[str], panels: list[dict[str, Any]], description: str = "") -> dict[str, Any]:
    return {
        "uid": f"{ctx.name}"[:40], "title": title, "description": description,
        "tags": [*tags, "tensorrt-llm", "trtllm-pipeline"], "timezone": "browser", "schemaVersion": 39,
        "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]},
        "panels": panels,
    }


def _dashboard_configmap(ctx: _Ctx) -> dict[str, Any]:
    meta = ctx.meta(f"{ctx.name}-dashboard")
    meta["labels"]["grafana_dashboard"] = "1"  # picked up by the Grafana sidecar (kube-prometheus-stack)
    if ctx.serving == "ensemble":
        board = dashboard(ctx)
    else:
        from pipeline.k8s_pytorch import pytorch_dashboard

        board = pytorch_dashboard(ctx)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {f"{ctx.name}.json": json.dumps(board, indent=2, ensure_ascii=False) + "\n"}}


def python_stub_count(repo: Path) -> int:
    """Python-backend instances of a rendered repository: the stub processes Triton starts for it."""
    from pipeline.render import parse_model_config

    count = 0
    for config_path in sorted(Path(repo).glob("*/config.pbtxt")):
        config = parse_model_config(config_path)
        if config.backend == "python":
            count += sum(group.count or 1 for group in config.instance_group) or 1
    return count


def render_manifests(profile: BuildProfile, spec: K8sSpec, *, size_bytes: int = 0, bundle_hash: str = "",
                     python_stubs: int = 0, serving: Serving = "ensemble",
                     max_batch_size: int = 0) -> dict[str, list[dict[str, Any]]]:
    """File name -> documents, in the order kustomization.yaml lists them. Pure: writes nothing.
    python_stubs sizes /dev/shm (python_stub_count of the bundle); serving and max_batch_size come from
    a PyTorch-backend deployable (pipeline/k8s_pytorch.py)."""
    gpu = get_gpu(profile.gpu)
    if gpu.is_cpu != (profile.runtime == "reference"):
        raise UnsupportedError(f"Profile {profile.name} pairs runtime {profile.runtime} with GPU {profile.gpu}.",
                               hint="The reference runtime runs on gpu 'cpu'; the tensorrtllm runtime needs a GPU.")
    if not gpu.is_cpu and not gpu.product_label:
        raise UnsupportedError(f"The GPU table has no nvidia.com/gpu.product label for {gpu.key}.",
                               hint="Add its GPU Feature Discovery product label to pipeline/data/gpus.json.")
    layout = plan_layout(profile, gpu, spec.gpus_per_node)
    one_pod_per_replica(layout, spec, serving)
    name = spec.name or default_name(profile, spec.api)
    ctx = _Ctx(profile, gpu, spec, layout, name, size_bytes, bundle_hash, python_stubs, serving, max_batch_size)
    files: dict[str, list[dict[str, Any]]] = {"serviceaccount.yaml": [_service_account(ctx)]}
    if ctx.lws:
        files.update(_lws_extras(ctx))
    if spec.model_store == "pvc" and spec.bundle_image:
        files["fill-models-job.yaml"] = [_fill_job(ctx)]
    files.update({
        ("leaderworkerset.yaml" if ctx.lws else "deployment.yaml"): [_workload(ctx)],
        "service.yaml": [_service(ctx)],
        "pdb.yaml": [_pdb(ctx)],
        "hpa.yaml": [_hpa(ctx)],
        "podmonitor.yaml": [_pod_monitor(ctx)],
        "prometheusrule.yaml": [_prometheus_rule(ctx)],
        "prometheus-adapter-rules.yaml": [_adapter_config(ctx)],
        "grafana-dashboard.yaml": [_dashboard_configmap(ctx)],
    })
    return files


def kustomization(files: list[str], namespace: str) -> dict[str, Any]:
    # fifo: `kubectl kustomize` emits the resources in this order, unchanged
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": namespace,
            "resources": list(files), "sortOptions": {"order": "fifo"}}


# ---------------------------------------------------------------------------------------------
# YAML and validation
# ---------------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:  # scripts, rule configs and dashboards stay readable as literal blocks
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


BUILTIN_GROUPS = ("v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v2", "rbac.authorization.k8s.io/v1")


def validate_document(doc: dict[str, Any], version: str = KUBERNETES_VERSION) -> list[str]:
    """Problems with one manifest: strict OpenAPI validation for built-in kinds, structure for CRDs."""
    import kubernetes_validate

    where = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"

    def strict(obj: dict[str, Any], label: str) -> list[str]:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = "/".join(str(p) for p in error.path)
            return [f"{label}: {error.message} (at {path or '/'})"]
        return []

    if doc.get("apiVersion") in BUILTIN_GROUPS:
        return strict(doc, where)
    problems = [f"{where}: missing {key}" for key in ("apiVersion", "kind", "metadata", "spec") if not doc.get(key)]
    spec = doc.get("spec") or {}
    kind = doc.get("kind")
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        if not isinstance(lwt.get("size"), int) or lwt["size"] < 2:
            problems.append(f"{where}: leaderWorkerTemplate.size must be an integer >= 2")
        for key in ("leaderTemplate", "workerTemplate"):
            template = lwt.get(key)
            if not template:
                problems.append(f"{where}: leaderWorkerTemplate.{key} is missing")
                continue
            problems += strict({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template},
                               f"{where} {key}")
    elif kind == "PodMonitor":
        if not (spec.get("selector") or {}).get("matchLabels"):
            problems.append(f"{where}: spec.selector.matchLabels is empty")
        for endpoint in spec.get("podMetricsEndpoints") or [{}]:
            if not endpoint.get("port"):
                problems.append(f"{where}: a podMetricsEndpoint has no port name")
    elif kind == "PrometheusRule":
        for group in spec.get("groups") or []:
            for rule in group.get("rules") or []:
                if not (rule.get("record") or rule.get("alert")) or not rule.get("expr"):
                    problems.append(f"{where}: rule without record/alert and expr in group {group.get('name')}")
                elif rule["expr"].count("(") != rule["expr"].count(")"):
                    problems.append(f"{where}: unbalanced parentheses in {rule.get('record') or rule.get('alert')}")
        if not spec.get("groups"):
            problems.append(f"{where}: no rule groups")
    else:
        problems.append(f"{where}: unknown apiVersion {doc.get('apiVersion')} (no schema to check it against)")
    return problems


def validate_files(files: dict[str, list[dict[str, Any]]], version: str = KUBERNETES_VERSION) -> list[str]:
    return [f"{name}: {p}" for name, docs in files.items() for doc in docs for p in validate_document(doc, version)]


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _renderer_hash() -> str:
    return sha256_file(Path(__file__))[:16]


def render_k8s(spec: K8sSpec) -> K8sResult:
    """Render, validate and atomically write the manifests for one engine's profile."""
    started = time.time()
    engine_dir = Path(spec.engine_dir).resolve() if spec.engine_dir else find_engine(spec.profile_id or "")
    if not engine_dir.is_dir():
        raise InvalidInputError(f"Engine folder {engine_dir} does not exist.", hint="Run `pipeline build` first or fix --engine.")
    from pipeline import k8s_pytorch

    profile = profile_from_engine(engine_dir)
    serving = k8s_pytorch.serving_for(spec, engine_dir, profile)
    one_pod_per_replica(plan_layout(profile, get_gpu(profile.gpu), spec.gpus_per_node), spec, serving)  # before any bundle
    size = engine_bytes(engine_dir)
    batch = 0
    if serving == "ensemble":
        bundle_dir = bundle_for(spec, engine_dir, profile)
    else:
        batch = k8s_pytorch.max_batch_size(engine_dir, profile)
        bundle_dir = (k8s_pytorch.openai_bundle_for if serving == "openai" else k8s_pytorch.llmapi_bundle_for)(
            spec, engine_dir, profile)
    bundle_hash = str((read_manifest(bundle_dir) or {}).get("inputs_hash") or "")
    files = render_manifests(profile, spec, size_bytes=size, bundle_hash=bundle_hash,
                             python_stubs=python_stub_count(bundle_dir), serving=serving, max_batch_size=batch)
    problems = validate_files(files)
    if problems:  # a bug in the renderer, never the user's input: say exactly what
        raise RuntimeError("Rendered manifests failed validation:\n" + "\n".join(problems))
    gpu = get_gpu(profile.gpu)
    layout = plan_layout(profile, gpu, spec.gpus_per_node)
    out = Path(spec.out).resolve() if spec.out else stage_dir(profile.model, "k8s", profile.id + ("-openai" if serving == "openai" else ""))
    options = spec.model_dump(mode="json", exclude={"out", "force", "profile_id", "engine_dir"})
    inputs = {"profile": profile.model_dump(mode="json"), "spec": options, "bundle": bundle_hash,
              "bundle_dir": str(bundle_dir), "engine_bytes": size, "triton_image": TRITON_IMAGE, "renderer": _renderer_hash()}
    inputs_hash = sha256_json(inputs)
    names = list(files) + ["kustomization.yaml", "Dockerfile", "DEPLOY.md"]
    steps = next_steps(spec, out, bundle_dir)
    result = K8sResult(out_dir=out, profile_id=profile.id, profile_name=profile.name, kind=layout.kind,
                       replicas=spec.replicas, pods_per_replica=layout.pods_per_replica, gpus_per_pod=layout.gpus_per_pod,
                       files=tuple(names), skipped=True, validated_with=f"kubernetes-validate --strict {KUBERNETES_VERSION}",
                       notes=notes_for(profile, spec, serving), bundle_dir=bundle_dir, next_steps=steps)
    if not spec.force and is_up_to_date(out, inputs_hash):
        return result
    with atomic_dir(out) as tmp:
        for name, docs in files.items():
            (tmp / name).write_text(dump_yaml(docs), encoding="utf-8")
        (tmp / "kustomization.yaml").write_text(dump_yaml([kustomization(list(files), spec.namespace)]), encoding="utf-8")
        (tmp / "Dockerfile").write_text(dockerfile(profile, spec, bundle_hash), encoding="utf-8")
        (tmp / "DEPLOY.md").write_text(deploy_text(spec, bundle_dir, steps, result.notes), encoding="utf-8")
        manifest = build_manifest(stage="k8s", inputs=inputs, inputs_hash=inputs_hash, folder=tmp, started=started,
                                  packages=("kubernetes-validate", "pyyaml"),
                                  extra={"engine_dir": str(engine_dir), "bundle_dir": str(bundle_dir), "kind": layout.kind,
                                         "validated_with": result.validated_with, "next_steps": list(steps)})
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return K8sResult(**{**result.__dict__, "skipped": False})


def bundle_for(spec: K8sSpec, engine_dir: Path, profile: BuildProfile) -> Path:
    """The bundle the model store will hold: --bundle (checked: rendered for /models, from this profile),
    else rendered (or reused, same inputs) at build/<model>/bundles/<profile-id>/."""
    from pipeline.render import RenderSpec, render

    if spec.bundle is None:
        return render(RenderSpec(engine=engine_dir, model_root=Path(MODEL_MOUNT),
                                 out=stage_dir(profile.model, "bundles", profile.id))).repo
    return given_bundle(Path(spec.bundle), engine_dir, profile)


def given_bundle(bundle: Path, engine_dir: Path, profile: BuildProfile, how: str | None = None) -> Path:
    """--bundle, checked: made for /models from this profile. `how` says how to make a right one."""
    from pipeline.bundle import recorded_root

    folder = Path(bundle).resolve()
    root = recorded_root(folder)
    how = how or f"Render it with `pipeline render --engine {engine_dir} --model-root {MODEL_MOUNT} --out DIR`"
    if root != Path(MODEL_MOUNT):
        raise InvalidInputError(f"--bundle {folder} is {'rendered for ' + str(root) if root else 'not a rendered bundle'}; "
                                f"the pods read it at {MODEL_MOUNT}.",
                                hint=f"{how}, or leave --bundle out to have it made.")
    recorded = (read_manifest(folder) or {}).get("profile")
    try:
        same = recorded is None or BuildProfile(**recorded).id == profile.id
    except (TypeError, ValidationError):
        same = False
    if not same:
        raise InvalidInputError(f"--bundle {folder} holds another engine than profile {profile.id}.",
                                hint="Pass the bundle rendered from this engine, or leave --bundle out.")
    return folder


def deploy_text(spec: K8sSpec, bundle_dir: Path, steps: tuple[str, ...], notes: tuple[str, ...]) -> str:
    lines = [f"# Deploying this folder (model store: {spec.model_store})", "",
             f"The bundle: {bundle_dir} (model root {MODEL_MOUNT}: every path in its configs starts there).", "",
             "```sh", *steps, "```", ""]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"

"""How a profile's ranks map onto pods (plan_layout), what one render knows (Ctx), and what each pod is
sized to: CPU, memory, /dev/shm, the startup budget and the model volume."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.core.deployable import PYTORCH_BACKEND
from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import GpuSpec
from pipeline.k8s.spec import HTTP_PORT, PORTS, PROFILE_LABEL, ROLE_LABEL, Api, K8sSpec, Serving
from pipeline.build.profiles import BuildProfile
from pipeline.core.versions import TRITON_RELEASE


# /dev/shm per Python-backend stub: Triton's python backend maps a region of shm-default-byte-size per
# model instance and grows it by shm-growth-byte-size (64 MiB each in older python_backend releases, 1 MiB
# in newer ones: src/python_be.cc, triton-inference-server/python_backend). The larger is budgeted, so the
# memory-backed /dev/shm fits every stub the rendered repository starts whichever release serves it.
PYTHON_STUB_SHM_BYTES = 64 << 20

# Host memory per byte of a pod's share of the model files, on a GPU.
# Engine: every rank reads its own rank<N>.engine into host memory before it goes to the GPU (x1.25 slack).
ENGINE_LOAD_FACTOR = 1.25
# PyTorch backend (Triton's LLM-API model and trtllm-serve; one pod holds every rank): TensorRT-LLM's
# HfWeightLoader (tensorrt_llm/_torch/models/checkpoints/hf/weight_loader.py, NVIDIA/TensorRT-LLM @149b2213:
# the code index holds no v1.1.0 tag and does not date its versions; the later ones read, up to @02086d89,
# do the same) runs in EVERY rank:
#   - load_weights (:27-56) takes every *.safetensors file of the checkpoint, whatever the rank's TP share;
#   - it prefetches them (:44-52) when their total is under 90% of psutil's available memory, which in a
#     container is the node's, not the pod's limit: the node's local ranks split the files between them
#     (prefetch_files :129, files[local_rank::local_size]) and each file is read whole with f.read()
#     (:118-119), up to 16 files at once per rank (:133-136). Those buffers are private (anonymous) memory,
#     and between them the ranks hold up to the whole checkpoint at once, on top of the page cache it fills;
#   - then every rank calls safetensors.torch.load_file on every file (:54-56, :94-96). With torch >= 1.11
#     safetensors maps the file (torch UntypedStorage.from_file, shared=False: a private, copy-on-write file
#     mapping; huggingface/safetensors @000a16f4 bindings/python/src/lib.rs, Open::new and get_tensor's
#     TorchStorage branch) and returns views into it, no copy: measured here with safetensors 0.8.0, the
#     tensors lie in an `rw-p` mapping of the file and RssFile, not RssAnon, grows by the file's size
#     (tests/conformance/test_safetensors_mapping.py). The pages are the page cache's, shared by the ranks
#     and charged once to the pod's cgroup, so the ranks do not hold a private copy each.
# So a pod needs the checkpoint up to once as the prefetch's private buffers (x1: over the limit, the pod is
# OOM-killed), once as page cache (x1: reclaimable, but below it the prefetched pages are evicted before
# load_file reads them and the load runs at disk speed), and the engine rule's slack for the per-tensor
# staging copies on the way to the GPU (x0.25).
PYTORCH_LOADER_FACTOR = 2.25


@dataclass(frozen=True)
class Layout:
    """How a profile's ranks map onto pods."""

    kind: Literal["Deployment", "LeaderWorkerSet"]
    world_size: int
    pods_per_replica: int
    gpus_per_pod: int  # 0 on the CPU reference runtime


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


@dataclass(frozen=True)
class Served:
    """What the model store holds and which server runs on it: facts of the engine or deployable folder
    and of its bundle (render_k8s reads them; render_manifests takes them as given)."""

    serving: Serving = "ensemble"
    size_bytes: int = 0  # the engine's (or deployable's) files: host memory and the S3 volume are sized from it
    bundle_hash: str = ""  # the bundle's inputs_hash: the pvc/s3 scripts wait for the bundle that names it
    python_stubs: int = 0  # Python-backend instances of the bundle (python_stub_count): they size /dev/shm
    max_batch_size: int = 0  # the LLM-API options' (llmapi: the in-flight target of the autoscaler)
    env: tuple[tuple[str, str], ...] = ()  # what a PyTorch-backend deployable asks of its process (TRTLLM_LOAD_KV_SCALES)


@dataclass(frozen=True)
class Ctx:
    """Everything one render knows; every manifest builder takes it."""

    profile: BuildProfile
    gpu: GpuSpec
    spec: K8sSpec
    layout: Layout
    name: str
    served: Served

    @property
    def openai(self) -> bool:
        return self.served.serving == "openai"

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


def milli(value: float) -> str:
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def pod_sizing(ctx: Ctx) -> dict[str, Any]:
    """CPU, memory, /dev/shm and startup budget from the profile and the engine's size.

    Each rank deserializes its engine in host memory before copying it to the GPU, so a pod needs its
    share of the engine (x1.25) plus a base for Triton, tokenizers and MPI. A PyTorch-backend pod loads
    the whole checkpoint, not a share: PYTORCH_LOADER_FACTOR says why. The reference runtime keeps the
    whole checkpoint in RAM (fp32 plus transformers' working copies: x2.5). A draft-target build's draft (its own
    build folder at <build>/draft/, loaded by the same server) is in size_bytes and sized as the target is."""
    gib = 1 << 30
    share = ctx.served.size_bytes / ctx.layout.pods_per_replica / gib
    # every Python-backend instance (stub process) maps its own /dev/shm region
    stubs_gib = ctx.served.python_stubs * PYTHON_STUB_SHM_BYTES / gib
    if ctx.cpu:
        cpu, memory, shm = 4, 4 + 2.5 * share, math.ceil(1 + stubs_gib)
    else:
        g = ctx.layout.gpus_per_pod
        factor = PYTORCH_LOADER_FACTOR if ctx.profile.backend == PYTORCH_BACKEND else ENGINE_LOAD_FACTOR
        cpu, memory, shm = 2 + 2 * g, 6 + 2 * g + factor * share, math.ceil(1 + g + stubs_gib)
    startup = ctx.spec.startup_timeout_s or int(min(3600, max(600, 300 + 10 * share)))
    return {"cpu": str(cpu), "memory_gib": math.ceil(memory), "shm_gib": shm, "startup_s": startup,
            "model_volume_gib": math.ceil(share * 1.25 + 2)}

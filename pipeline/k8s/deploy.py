"""What the user runs and reads to deploy: the Dockerfile of the bundle image, the next steps (also in
DEPLOY.md) and the notes to know before applying."""

from __future__ import annotations

from pathlib import Path

from pipeline.k8s.spec import MODEL_MOUNT, K8sSpec, Serving
from pipeline.k8s.workloads import CPU_IMAGE_NOTE
from pipeline.build.profiles import BuildProfile
from pipeline.core.gpus import get_gpu
from pipeline.core.versions import TRITON_IMAGE


def _platform(profile: BuildProfile) -> str | None:
    """The image platform the GPU's node needs (linux/arm64 on a Grace superchip), None where the GPU fixes none."""
    arch = get_gpu(profile.gpu).host_arch
    return f"linux/{arch}" if arch else None


def notes_for(profile: BuildProfile, spec: K8sSpec, serving: Serving = "ensemble") -> tuple[str, ...]:
    """What a user must know before applying these manifests."""
    notes = []
    if serving == "openai":
        notes.append("trtllm-serve exports Prometheus metrics at /prometheus/metrics only with the LLM-API option "
                     "return_perf_metrics: true; the bundle's llm_api_options.yaml sets it (the deployable's is unchanged)")
    if serving == "llmapi":
        notes.append("the Triton LLM-API model exports Triton's core metrics and its own pipeline_requests_in_flight "
                     "(no nv_trt_llm_* families): the autoscaler holds requests in flight per pod at 0.8 x the "
                     "options' max_batch_size")
    if profile.runtime == "reference" and not spec.image:
        notes.append(f"{CPU_IMAGE_NOTE}; the default {TRITON_IMAGE} does not carry the pipeline")
    if profile.runtime == "reference" and spec.model_store in ("image", "pvc") and not spec.base_image:
        notes.append(f"the generated Dockerfile builds FROM {TRITON_IMAGE}; for the reference runtime's image pass "
                     "--base-image <an image with the pipeline> (the project's Dockerfile image)")
    if platform := _platform(profile):
        notes.append(f"{profile.gpu} nodes run an Arm Grace CPU: the pods require kubernetes.io/arch="
                     f"{get_gpu(profile.gpu).host_arch}, and the serving image and the bundle image must be built for "
                     f"{platform} (docker build --platform {platform}; the project's image: make image PLATFORM={platform})")
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
    platform = _platform(profile)
    flag = f"--platform {platform} " if platform else ""
    return f"""\
# syntax=docker/dockerfile:1
# {profile.name} ({profile.id}): the bundle rendered for {MODEL_MOUNT}, on {base}.
# Every path in the bundle's configs starts with {MODEL_MOUNT}. Build with the bundle folder as the context:
#   docker build {flag}-f Dockerfile -t IMAGE <bundle folder>
FROM {base}
LABEL org.opencontainers.image.title="{profile.model} {profile.name}" \\
      trtllm-pipeline.profile-id="{profile.id}" \\
      trtllm-pipeline.render.bundle="{bundle_hash}"
COPY . {MODEL_MOUNT}/
"""


def next_steps(profile: BuildProfile, spec: K8sSpec, out: Path, bundle_dir: Path) -> tuple[str, ...]:
    """The commands that put the bundle in the model store and deploy (printed, and in DEPLOY.md)."""
    platform = _platform(profile)
    build = f"docker build {f'--platform {platform} ' if platform else ''}-f {out / 'Dockerfile'} -t {{image}} {bundle_dir} && docker push {{image}}"
    apply = f"kubectl apply -k {out}"
    if spec.model_store == "image":
        return (build.format(image=spec.image), apply)
    if spec.model_store == "s3":
        return (f"aws s3 sync {bundle_dir} {spec.s3_uri} --delete", apply)
    if spec.bundle_image:
        return (build.format(image=spec.bundle_image), f"{apply}   # the Job fills the claim; pods wait for it")
    return (f"copy {bundle_dir}/ to the root of the claim {spec.pvc_name or '<name>-models'}, manifest.json last",
            f"{apply}   # pods wait until the claim holds the bundle")


def deploy_text(spec: K8sSpec, bundle_dir: Path, steps: tuple[str, ...], notes: tuple[str, ...]) -> str:
    lines = [f"# Deploying this folder (model store: {spec.model_store})", "",
             f"The bundle: {bundle_dir} (model root {MODEL_MOUNT}: every path in its configs starts there).", "",
             "```sh", *steps, "```", ""]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"

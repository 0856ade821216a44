"""`pipeline k8s render`: Kubernetes manifests for one build profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli._options import APIS, ForceOpt, JsonOpt, OutDirOpt, one_of, set_json, spec_from_options
from pipeline.k8s import K8sSpec, render_k8s
from pipeline.core.output import OUT, simple_table

ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="Build profile id (or readable name) under build/*/engines/.")]
EngineOpt = Annotated[Optional[Path], typer.Option("--engine", help="Engine folder with a manifest.json (instead of --profile).")]
ApiOpt = Annotated[str, typer.Option(
    "--api", parser=one_of("--api", APIS), help="triton: tritonserver (engine ensemble, or the Triton LLM-API repository of a PyTorch-backend deployable); "
    "openai: trtllm-serve (PyTorch-backend deployables).")]
ReplicasOpt = Annotated[int, typer.Option("--replicas", min=1, help="Initial replicas (each replica = one pod, or one LeaderWorkerSet group).")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", help="Namespace of every resource.")]
ModelStoreOpt = Annotated[str, typer.Option("--model-store", help="Where the Triton repository comes from: pvc, image or s3.")]
S3UriOpt = Annotated[Optional[str], typer.Option("--s3-uri", help="s3://BUCKET/PREFIX of the repository (with --model-store s3).")]
PvcNameOpt = Annotated[Optional[str], typer.Option("--pvc-name", help="PersistentVolumeClaim holding the repository (default <name>-models).")]
ImageOpt = Annotated[Optional[str], typer.Option("--image", help="Serving image (default: the pinned Triton TensorRT-LLM image).")]
MinReplicasOpt = Annotated[Optional[int], typer.Option("--min-replicas", min=1, help="Autoscaler minimum (default --replicas).")]
MaxReplicasOpt = Annotated[Optional[int], typer.Option("--max-replicas", min=1, help="Autoscaler maximum (default max(4, --replicas)).")]
GpusPerNodeOpt = Annotated[Optional[int], typer.Option("--gpus-per-node", min=1, help="GPUs per node; larger worlds become a LeaderWorkerSet (default: the GPU's node: 8, a GB200 NVL72 tray 4).")]
NameOpt = Annotated[Optional[str], typer.Option("--name", help="Resource name (default triton-<model>-<profile id>).")]
HfSecretOpt = Annotated[str, typer.Option("--hf-token-secret", help="Secret with key HF_TOKEN (referenced, never inlined).")]
QueueRatioOpt = Annotated[float, typer.Option("--queue-ratio-target", help="HPA target of trtllm-serve (--api openai): queue time per unit of compute time.")]
BundleOpt = Annotated[Optional[Path], typer.Option(
    "--bundle", help="A bundle rendered with --model-root /models (default: render one under build/<model>/bundles/).")]
BundleImageOpt = Annotated[Optional[str], typer.Option(
    "--bundle-image", help="pvc: the image built from the generated Dockerfile; a Job copies its bundle into the claim.")]
BaseImageOpt = Annotated[Optional[str], typer.Option(
    "--base-image", help="FROM of the generated Dockerfile (default: the pinned Triton image).")]


def register(app: typer.Typer) -> None:
    k8s = typer.Typer(name="k8s", help="Kubernetes manifests for Triton and trtllm-serve deployments.", no_args_is_help=True)
    k8s.command("render")(render)
    app.add_typer(k8s, name="k8s")


def render(
    profile: ProfileOpt = None,
    engine: EngineOpt = None,
    api: ApiOpt = "triton",
    replicas: ReplicasOpt = 1,
    namespace: NamespaceOpt = "default",
    model_store: ModelStoreOpt = "pvc",
    s3_uri: S3UriOpt = None,
    pvc_name: PvcNameOpt = None,
    image: ImageOpt = None,
    bundle: BundleOpt = None,
    bundle_image: BundleImageOpt = None,
    base_image: BaseImageOpt = None,
    min_replicas: MinReplicasOpt = None,
    max_replicas: MaxReplicasOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
    name: NameOpt = None,
    hf_token_secret: HfSecretOpt = "hf-token",
    queue_ratio_target: QueueRatioOpt = 1.0,
    out: OutDirOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Render the /models bundle, Deployment/LeaderWorkerSet, Service, HPA, PDB, monitoring, dashboard and the
    Dockerfile / fill Job / S3 sync that put the bundle in the model store, for a profile."""
    set_json(json_output)
    spec = spec_from_options(  # K8sSpec checks every value (--model-store, --api, names, images) once
        K8sSpec,
        profile_id=profile, engine_dir=engine, api=api, replicas=replicas, namespace=namespace, model_store=model_store,
        s3_uri=s3_uri, pvc_name=pvc_name, image=image, bundle=bundle, bundle_image=bundle_image, base_image=base_image,
        min_replicas=min_replicas, max_replicas=max_replicas,
        gpus_per_node=gpus_per_node, name=name, hf_token_secret=hf_token_secret,
        queue_ratio_target=queue_ratio_target, out=out, force=force,
    )
    result = render_k8s(spec)
    state = "unchanged (same inputs)" if result.skipped else "written"
    OUT.info(f"{result.kind} for {result.profile_name}: {state} in {result.out_dir}")
    OUT.info(f"bundle for /models: {result.bundle_dir}")
    for note in result.notes:
        OUT.warn(note)
    for step in result.next_steps:
        OUT.info(f"next: {step}")
    OUT.result(
        result,
        table=simple_table(
            f"k8s manifests ({result.validated_with})",
            ["profile", "kind", "replicas", "pods/replica", "GPUs/pod", "files", "folder"],
            [[result.profile_id, result.kind, result.replicas, result.pods_per_replica, result.gpus_per_pod,
              len(result.files), result.out_dir]],
        ),
    )

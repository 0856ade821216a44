"""Kubernetes manifests for one build profile: Triton on GPUs (or the CPU reference runtime), or trtllm-serve.

`render_k8s(spec)` writes `build/<model>/k8s/<profile-id>/`: plain YAML files and a
kustomization.yaml, so `kubectl apply -k DIR` deploys it unchanged. The manifests are built as
Python dicts, checked on every render against the Kubernetes OpenAPI schemas (kubernetes-validate,
strict) where the kind is built in, and structurally where it is a CRD (LeaderWorkerSet, PodMonitor,
PrometheusRule; their pod templates are still checked against the core PodTemplate schema).

Shape:
- world size fits one node (<= gpus_per_node): a Deployment; one pod per replica holds every rank
  (mpirun when world size > 1). Larger: a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) with one pod
  per node; the leader runs mpirun across the group, reaching the workers through `kubectl exec`
  as MPI's remote agent (the pattern of NVIDIA's multi-node Triton tutorial).
- the reference runtime (gpu `cpu`) renders too: no GPU resources, node affinity or toleration;
  its image must carry the pipeline's Python dependencies (pass --image). Its container has a CPU
  limit, passed to the runtime as PIPELINE_CPU_LIMIT (downward API) to size its torch threads.
- the model store holds a bundle rendered for /models (pipeline/render/bundle.py; rendered or reused here
  at build/<model>/bundles/<profile-id>/, or --bundle DIR): every path in its configs starts with
  /models, where every store puts it. Getting it there is generated too: a Dockerfile (FROM the
  pinned Triton image, the bundle at /models; the image store, and the PVC fill Job's source), a Job
  that fills the claim (pvc, with --bundle-image), an init container that syncs the S3 prefix (s3).
  Pods of the pvc and s3 stores start Triton only once /models/manifest.json names the bundle.
- a PyTorch-backend deployable (pipeline build --backend pytorch: model/ + llm_api_options.yaml) has two
  APIs (pytorch.py): `--api triton`, tritonserver on the Triton LLM-API repository `pipeline render`
  makes of it, and `--api openai`, `trtllm-serve` on the deployable itself (probes on /health,
  Prometheus scraping /prometheus/metrics). Same stores, GPU affinity, security context and
  validation; one pod per replica (multi-node PyTorch-backend serving is not rendered).

One module per concern, each importing only those before it:
  spec        K8sSpec (validated once) and the shared names: ports, probe paths, /models, labels
  layout      plan_layout (Deployment or LeaderWorkerSet), Served, Ctx (one render's facts), pod sizing
  containers  the serving container and its command (pipeline/serve/commands.py), env, volumes, probes
  stores      the model store: S3 sync, pvc wait, the Job that fills the claim
  workloads   Deployment / LeaderWorkerSet, pod spec, RBAC and launcher, Service, PDB, ServiceAccount
  monitoring  PodMonitor, recording rule, adapter rule, HPA, Grafana dashboard (pipeline/data/k8s/)
  deploy      Dockerfile, next steps, DEPLOY.md, notes
  output      YAML and kustomization.yaml
  validation  OpenAPI and CRD checks
  inputs      the engine folder, its profile and size, the bundle (--bundle or rendered)
  pytorch     PyTorch-backend deployables: which API, their bundles
  stage       render_manifests (pure) and render_k8s (the stage)
"""

from pipeline.k8s.inputs import find_engine, python_stub_count
from pipeline.k8s.layout import PYTHON_STUB_SHM_BYTES, Layout, Served, plan_layout
from pipeline.k8s.monitoring import HPA_MODEL, TRITON_CORE_METRICS
from pipeline.k8s.output import dump_yaml
from pipeline.k8s.spec import LIVE_PATH, MODEL_MOUNT, READY_PATH, K8sSpec
from pipeline.k8s.stage import K8sResult, render_k8s, render_manifests
from pipeline.k8s.validation import KUBERNETES_VERSION, validate_document, validate_files

__all__ = [
    "HPA_MODEL", "KUBERNETES_VERSION", "LIVE_PATH", "MODEL_MOUNT", "PYTHON_STUB_SHM_BYTES", "READY_PATH",
    "TRITON_CORE_METRICS", "K8sResult", "K8sSpec", "Layout", "Served", "dump_yaml", "find_engine", "plan_layout",
    "python_stub_count", "render_k8s", "render_manifests", "validate_document", "validate_files",
]

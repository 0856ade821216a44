"""The workload and what surrounds it: the Deployment (world fits a node) or LeaderWorkerSet (one pod per
node; the leader's mpirun reaches the workers through `kubectl exec`, with its RBAC and launcher scripts),
its pod spec (GPU affinity and toleration, init containers of the model store), the Service, the
PodDisruptionBudget and the ServiceAccount."""

from __future__ import annotations

from typing import Any, Literal

from pipeline.k8s.containers import pod_security, pod_volumes, server_container, worker_container
from pipeline.k8s.layout import Ctx, pod_sizing
from pipeline.k8s.spec import DRAIN_SECONDS, LWS_API, ROLE_LABEL
from pipeline.k8s.stores import fetch_container, wait_container


def _affinity(ctx: Ctx) -> dict[str, Any] | None:
    if ctx.cpu:
        return None
    expressions = [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [ctx.gpu.product_label]}]
    if ctx.gpu.host_arch:  # a Grace superchip's node is arm64: stated beside the product label, as the image must match it
        expressions.append({"key": "kubernetes.io/arch", "operator": "In", "values": [ctx.gpu.host_arch]})
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": expressions}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "labelSelector": {"matchLabels": dict(ctx.serving_selector)}, "topologyKey": "kubernetes.io/hostname"}}]},
    }


def _pod_spec(ctx: Ctx, role: Literal["single", "leader", "worker"]) -> dict[str, Any]:
    sizing = pod_sizing(ctx)
    volumes, mounts = pod_volumes(ctx, sizing)
    container = worker_container(ctx, sizing, mounts) if role == "worker" else server_container(ctx, sizing, mounts)
    spec: dict[str, Any] = {
        "serviceAccountName": ctx.name,
        "automountServiceAccountToken": role == "leader",  # only the leader calls the API (kubectl exec)
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": ctx.spec.exit_timeout_s + DRAIN_SECONDS + 15,
        "containers": [container],
        "volumes": volumes,
    }
    if ctx.spec.model_store == "s3":
        spec["initContainers"] = [fetch_container(ctx)]
    elif ctx.spec.model_store == "pvc":
        spec["initContainers"] = [wait_container(ctx)]
    affinity = _affinity(ctx)
    if affinity:
        spec["affinity"] = affinity
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return spec


CPU_IMAGE_NOTE = ("the reference runtime's Python backend imports torch, transformers and this pipeline: "
                  "serve it from an image that has them (--image, e.g. the project's Dockerfile image)")


def _annotations(ctx: Ctx) -> dict[str, str]:
    notes = {"trtllm-pipeline/image-note": CPU_IMAGE_NOTE} if ctx.cpu else {}
    return {"trtllm-pipeline/profile-name": ctx.profile.name, "trtllm-pipeline/model": ctx.profile.model,
            "trtllm-pipeline/gpu": ctx.profile.gpu, "trtllm-pipeline/world-size": str(ctx.layout.world_size), **notes}


def workload(ctx: Ctx) -> dict[str, Any]:
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


def lws_extras(ctx: Ctx) -> dict[str, list[dict[str, Any]]]:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": ctx.meta(),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": ctx.meta(),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ctx.name},
               "subjects": [{"kind": "ServiceAccount", "name": ctx.name, "namespace": ctx.ns}]}
    launcher = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ctx.meta(f"{ctx.name}-mpi-launcher"),
                "data": {"lws-leader.sh": _LWS_LEADER_SH, "kubexec.sh": _KUBEXEC_SH}}
    return {"rbac.yaml": [role, binding], "mpi-launcher.yaml": [launcher]}


def service(ctx: Ctx) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": ctx.meta(),
            "spec": {"type": "ClusterIP", "selector": dict(ctx.serving_selector),
                     "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ctx.ports.items()]}}


def pdb(ctx: Ctx) -> dict[str, Any]:
    # maxUnavailable (not minAvailable) so that a single replica never blocks a node drain forever
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": ctx.meta(),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(ctx.selector)}}}


def service_account(ctx: Ctx) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ctx.meta(), "automountServiceAccountToken": False}

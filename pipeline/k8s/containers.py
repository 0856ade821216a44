"""The serving container (tritonserver, mpirun over its ranks, or trtllm-serve), a LeaderWorkerSet
worker's idle container, their environment, volumes, probes and security context."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pipeline.serve.commands import TritonLaunch, mpirun_command, trtllm_serve_command, tritonserver_command
from pipeline.core.deployable import MODEL_SUBDIR, OPTIONS_FILE
from pipeline.k8s.layout import Ctx
from pipeline.k8s.spec import (
    DRAIN_SECONDS, GRPC_PORT, HTTP_PORT, LIVE_PATH, METRICS_PORT, MODEL_MOUNT, READY_PATH, RUN_AS,
)
from pipeline.build.profiles import BuildProfile
from pipeline.serve.trtllm_serve import HEALTH_PATH
from pipeline.core.versions import TRITON_IMAGE


def _tritonserver_args(ctx: Ctx) -> list[str]:
    return [f"--exit-timeout-secs={ctx.spec.exit_timeout_s}", "--metrics-config=histogram_latencies=true",
            "--allow-cpu-metrics=true", f"--allow-gpu-metrics={'false' if ctx.cpu else 'true'}"]


def server_command(ctx: Ctx) -> list[str]:
    """The container command: trtllm-serve, tritonserver, or one rank per GPU under mpirun.

    Reuses pipeline.serve.commands' builders (the same flags as tensorrtllm_backend's
    launch_triton_server.py) with the ports and repository of the pod."""
    if ctx.openai:
        return trtllm_serve_pod_command(ctx.profile)
    spec = TritonLaunch(repo=Path(MODEL_MOUNT), http_port=HTTP_PORT, grpc_port=GRPC_PORT, metrics_port=METRICS_PORT,
                        world_size=ctx.layout.world_size, extra_args=tuple(_tritonserver_args(ctx)))
    if ctx.layout.world_size == 1 or ctx.served.serving == "llmapi":  # the LLM API starts its own workers
        return tritonserver_command(spec, "tritonserver")
    command = mpirun_command(spec, "tritonserver")
    if ctx.lws:
        hosts = ",".join(["$(POD_NAME)"] + [f"$(POD_NAME)-{i}" for i in range(1, ctx.layout.pods_per_replica)])
        slots = ",".join(f"{h}:{ctx.layout.gpus_per_pod}" for h in hosts.split(","))
        launcher = ["/bin/sh", "/opt/pipeline/lws-leader.sh"]
        command = launcher + command[:2] + ["--host", slots, "--mca", "plm_rsh_agent", "/opt/pipeline/kubexec.sh"] + command[2:]
    return command


def trtllm_serve_pod_command(profile: BuildProfile) -> list[str]:
    """trtllm-serve on the bundle at /models."""
    return trtllm_serve_command(Path(MODEL_MOUNT) / MODEL_SUBDIR, Path(MODEL_MOUNT) / OPTIONS_FILE, "0.0.0.0", HTTP_PORT,
                                tp_size=profile.tp, pp_size=profile.pp)


def security(read_only: bool = True) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": read_only,
            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _env(ctx: Ctx) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/tmp"},
        {"name": "HF_HOME", "value": "/tmp/hf"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ctx.spec.hf_token_secret, "key": "HF_TOKEN", "optional": True}}},
    ]
    if ctx.lws:
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    env += [{"name": name, "value": value} for name, value in ctx.served.env]  # the deployable's, e.g. TRTLLM_LOAD_KV_SCALES
    if ctx.cpu:  # the reference runtime sizes its torch threads from this, not from the node's cores
        env.append({"name": "PIPELINE_CPU_LIMIT", "valueFrom": {"resourceFieldRef": {
            "containerName": ctx.container, "resource": "limits.cpu", "divisor": "1"}}})
    return env


def pod_volumes(ctx: Ctx, sizing: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
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


def server_container(ctx: Ctx, sizing: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
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
        "securityContext": security(),
        "volumeMounts": mounts,
    }


def probe_paths(ctx: Ctx) -> tuple[str, str]:
    """(readiness/startup, liveness) HTTP paths: Triton's health API, or trtllm-serve's /health."""
    if ctx.openai:
        return HEALTH_PATH, HEALTH_PATH
    return READY_PATH, LIVE_PATH


def worker_container(ctx: Ctx, sizing: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """A LeaderWorkerSet worker: idles until the leader's mpirun starts ranks in it via kubectl exec."""
    container = server_container(ctx, sizing, mounts)
    container["command"] = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done"]
    for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
        container.pop(key)
    return container

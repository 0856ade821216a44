"""The pipeline as it is shipped: the wheel, installed non-editable in a fresh venv, renders and serves
from another working directory. The Dockerfile's own install steps are no longer replayed here: `make image-test`
(tests/image/, part of .ci/run) builds the Dockerfile for real and runs the installed pipeline inside it.

The fresh venvs reuse this environment's third-party packages through a .pth file (standing in for
the image's system site-packages, and saving a multi-GB reinstall); the pipeline itself comes only
from the wheel. A .pth line adds a folder to sys.path without processing the .pth files inside it, so
this checkout's editable install is not visible from those venvs (test_installed_pipeline_is_the_wheel).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import dockerfile_helpers
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, env={**_clean_env(), **(env or {})}, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{argv}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _clean_env() -> dict[str, str]:
    """This environment without anything that would point a child at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIPELINE_TEMPLATES_DIR", "PIPELINE_REFERENCE_DIR")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _venv(path: Path, *, with_pip: bool) -> Path:
    """A venv on this Python's base interpreter that sees this environment's packages through a .pth."""
    _run([sys.executable, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(path)], cwd=path.parent)
    purelib = _run([str(path / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=path.parent).stdout.strip()
    Path(purelib, "_reuse_test_environment.pth").write_text(SITE_PACKAGES + "\n")
    return path


def _stage_context(into: Path) -> Path:
    """The files the Dockerfile COPYs, laid out under its WORKDIR, as the image has them."""
    workdir = into
    for keyword, rest in dockerfile_helpers.instructions():
        if keyword == "WORKDIR":
            workdir = into / rest.lstrip("/")
        elif keyword == "COPY":
            *sources, dest = rest.split()
            target = into / dest.lstrip("/") if dest.startswith("/") else workdir / dest
            for source in sources:  # Docker's rules: a folder's contents go to dest; files into dest/ or as dest
                path = ROOT / source
                if path.is_dir():
                    shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
                elif dest.endswith("/"):
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / path.name)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
    return workdir


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel` of a clean copy of the sources (an in-tree build would write build/ into the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    source = _stage_context(base / "context")
    started = time.monotonic()
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(base / "dist"), str(source)], cwd=base)
    print(f"\nwheel built in {time.monotonic() - started:.1f} s")
    return next((base / "dist").glob("trtllm_pipeline-*.whl"))


def test_wheel_carries_templates_and_contract_tables(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {f"pipeline/model_repo_templates/{p.relative_to(ROOT / 'model_repo_templates').as_posix()}"
                 for p in (ROOT / "model_repo_templates").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert templates and templates <= names, sorted(templates - names)
    for table in ("triton_trtllm_model_io.tsv", "triton_trtllm_parameters.tsv", "triton_trtllm_required_parameters.tsv",
                  "README.md"):
        assert f"pipeline/data/reference/{table}" in names
    assert not any(n.startswith(("model_repo_templates/", "tests/")) for n in names)


@pytest.mark.triton
def test_installed_wheel_renders_and_serves_from_another_directory(wheel: Path, demo_engine: Path,
                                                                   tmp_path: Path) -> None:
    started = time.monotonic()
    venv = _venv(tmp_path / "venv", with_pip=False)
    python, pipeline = str(venv / "bin" / "python"), str(venv / "bin" / "pipeline")
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)
    installed_s = time.monotonic() - started
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run([python, "-c", "import pipeline, pipeline.render as r, pipeline.render.checks as c; print(pipeline.__file__); "
                  "print(r.templates_dir()); print(c.reference_tables_dir())"], cwd=elsewhere).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where  # the wheel's copy, not the checkout's

    bundle = tmp_path / "bundle"
    _run([pipeline, "render", "--engine", str(demo_engine), "--out", str(bundle), "--json"], cwd=elsewhere)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["checks"]["contract"].endswith(str(Path(where[2])))  # checked against the packaged tables

    from pipeline.serve import free_port

    http, grpc, metrics = free_port(), free_port(), free_port()
    server = subprocess.Popen([pipeline, "serve", str(bundle), "--http-port", str(http), "--grpc-port", str(grpc),
                               "--metrics-port", str(metrics), "--log-file", str(tmp_path / "server.log"), "--timeout", "600"],
                              cwd=elsewhere, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        _wait_ready(server, http, tmp_path / "server.log")
        smoke = subprocess.run([pipeline, "smoke", "--url", f"127.0.0.1:{grpc}", "--json"], cwd=elsewhere,
                               env=_clean_env(), capture_output=True, text=True, timeout=600)
        report = json.loads(smoke.stdout)
        assert smoke.returncode == 0, [c for c in report["checks"] if not c["passed"]]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    print(f"\nwheel installed in {installed_s:.1f} s; render + serve + smoke from the venv in "
          f"{time.monotonic() - started - installed_s:.1f} s")


def _wait_ready(server: subprocess.Popen, http: int, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            output = server.stdout.read().decode(errors="replace") if server.stdout else ""
            pytest.fail(f"`pipeline serve` exited with {server.returncode}:\n{output[-3000:]}\n"
                        f"{log.read_text(errors='replace')[-3000:] if log.exists() else ''}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2).status == 200:
                # `pipeline serve` reports ready after its warm-up; give it the moment it needs
                time.sleep(1)
                return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail("the installed pipeline's server was not ready in time")

"""pipeline.core.tool_env and the environments the pipeline's children get: NVIDIA's tools and servers never see the
pipeline's virtual environment, the CPU reference runtime always does (#21, blocker 2). The image test
(`make image-test`) proves the same from inside each process of the built image."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from pipeline.serve import deployable_env, needs_pipeline, server_environment
from pipeline.core.tool_env import nvidia_environment, pipeline_environment
from pipeline.serve.triton_binary import TritonBinary


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "opt" / "pipeline"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python3").symlink_to(sys.executable)
    return venv


def test_nvidia_environment_drops_every_trace_of_the_venv(tmp_path: Path) -> None:
    venv = _venv(tmp_path)
    base = {"PATH": f"{venv}/bin:/opt/tritonserver/bin:/usr/bin", "VIRTUAL_ENV": str(venv), "HOME": "/home/x",
            "PYTHONPATH": f"{venv}/lib/python3.11/site-packages:/opt/extra", "LD_LIBRARY_PATH": "/opt/tritonserver/lib"}
    env = nvidia_environment(base, prefix=venv)
    assert env["PATH"] == "/opt/tritonserver/bin:/usr/bin"
    assert "VIRTUAL_ENV" not in env and env["PYTHONPATH"] == "/opt/extra"
    assert env["HOME"] == "/home/x" and env["LD_LIBRARY_PATH"] == "/opt/tritonserver/lib"
    # what an embedded CPython would find as `python3`: not the venv's
    found = shutil.which("python3", path=env["PATH"])
    assert found is None or not Path(found).parent.resolve().is_relative_to(venv.resolve())


def test_nvidia_environment_leaves_what_is_not_the_venv(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/x", "VIRTUAL_ENV": "/elsewhere"}
    assert nvidia_environment(base, prefix=_venv(tmp_path)) == base


def test_pipeline_environment_puts_this_interpreter_first_once() -> None:
    own = str(Path(sys.executable).parent)
    env = pipeline_environment({"PATH": f"/usr/bin:{own}:/bin"})
    assert env["PATH"].split(os.pathsep) == [own, "/usr/bin", "/bin"]


def _repo(tmp_path: Path, runtime: str | None, model_py: str = "") -> Path:
    repo = tmp_path / "repo"
    (repo / "tensorrt_llm" / "1").mkdir(parents=True)
    (repo / "tensorrt_llm" / "config.pbtxt").write_text('name: "tensorrt_llm"\n')
    if model_py:
        (repo / "tensorrt_llm" / "1" / "model.py").write_text(model_py)
    if runtime is not None:
        (repo / "manifest.json").write_text(json.dumps({"runtime": runtime}))
    return repo


@pytest.mark.parametrize("runtime, model_py, expected", [
    ("reference", "", True), ("tensorrtllm", "", False), ("llmapi", "from pipeline.reference_runtime import x", False),
    (None, "from pipeline.reference_runtime.engine import ReferenceEngine", True), (None, "import numpy", False),
])
def test_which_repositories_import_the_pipeline(tmp_path: Path, runtime, model_py, expected) -> None:
    assert needs_pipeline(_repo(tmp_path, runtime, model_py)) is expected


def test_nvidias_tritonserver_serves_engines_without_the_venv_and_the_reference_runtime_with_it(tmp_path, monkeypatch) -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment: there is no venv to keep away")
    own_bin = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{own_bin}:/opt/tritonserver/bin:/usr/bin")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    image = TritonBinary(path=Path("/opt/tritonserver/bin/tritonserver"), source="PATH")
    engine_env = server_environment(_repo(tmp_path / "a", "tensorrtllm"), image)
    assert own_bin not in engine_env["PATH"].split(os.pathsep) and "VIRTUAL_ENV" not in engine_env
    reference_env = server_environment(_repo(tmp_path / "b", "reference"), image)
    assert reference_env["PATH"].split(os.pathsep)[0] == own_bin
    # the wheel's server runs the stub built for this interpreter: everything stays in this environment
    wheel = TritonBinary(path=Path("/x/tritonserver"), source="nvidia-pytriton", env={"LD_LIBRARY_PATH": "/x/libs"})
    wheel_env = server_environment(_repo(tmp_path / "c", "tensorrtllm"), wheel)
    assert wheel_env["PATH"].split(os.pathsep)[0] == own_bin and wheel_env["LD_LIBRARY_PATH"] == "/x/libs"


def test_an_llmapi_repositorys_deployable_environment_reaches_tritonserver(tmp_path: Path) -> None:
    """TRTLLM_LOAD_KV_SCALES=1 from the deployable's manifest (copied into tensorrt_llm/1/) goes to NVIDIA's server."""
    repo = _repo(tmp_path, "llmapi")
    (repo / "tensorrt_llm" / "1" / "manifest.json").write_text(json.dumps({"env": {"TRTLLM_LOAD_KV_SCALES": "1"}}))
    assert deployable_env(repo) == {"TRTLLM_LOAD_KV_SCALES": "1"}
    image = TritonBinary(path=Path("/opt/tritonserver/bin/tritonserver"), source="PATH")
    assert server_environment(repo, image)["TRTLLM_LOAD_KV_SCALES"] == "1"
    assert deployable_env(_repo(tmp_path / "engine", "tensorrtllm")) == {}

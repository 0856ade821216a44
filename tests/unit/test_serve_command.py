"""pipeline.serve without a server: command lines (the mpirun contract), ports, log parsing, refusals."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.errors import InvalidInputError, UnsupportedError
from pipeline.serve import (
    ServerSpec,
    TritonBinary,
    check_repo,
    load_failures,
    mpirun_command,
    resolve_ports,
    tritonserver_command,
)

ECHO_REPO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_repo"


def _trtllm_repo(tmp_path: Path) -> Path:
    for name, backend in (("tensorrt_llm", "tensorrtllm"), ("ensemble", None), ("preprocessing", "python")):
        (tmp_path / name).mkdir()
        text = f'name: "{name}"\n' + (f'backend: "{backend}"\n' if backend else 'platform: "ensemble"\n')
        (tmp_path / name / "config.pbtxt").write_text(text)
    return tmp_path


def test_single_process_command_has_repo_backends_and_ports(tmp_path: Path) -> None:
    spec = ServerSpec(repo=tmp_path, http_port=1, grpc_port=2, metrics_port=3, extra_args=("--log-verbose=1",))
    binary = TritonBinary(path=Path("/x/tritonserver"), backend_dir=Path("/cache/backends"))
    assert tritonserver_command(spec, binary) == [
        "/x/tritonserver", f"--model-repository={tmp_path.resolve()}", "--backend-directory=/cache/backends",
        "--grpc-port=2", "--http-port=1", "--metrics-port=3", "--exit-timeout-secs=30", "--log-verbose=1",
    ]
    assert "--exit-timeout-secs=5" in tritonserver_command(spec.model_copy(update={"exit_timeout_s": 5}), binary)


def test_mpirun_command_matches_launch_triton_server_contract(tmp_path: Path) -> None:
    """One `-n 1` app context per rank; rank 0 loads everything, the others only tensorrt_llm."""
    spec = ServerSpec(repo=tmp_path, http_port=8000, grpc_port=8001, metrics_port=8002, world_size=2)
    repo = tmp_path.resolve()
    common = ["--grpc-port=8001", "--http-port=8000", "--metrics-port=8002"]
    assert mpirun_command(spec, "/opt/tritonserver/bin/tritonserver") == [
        "mpirun", "--allow-run-as-root",
        "-n", "1", "/opt/tritonserver/bin/tritonserver", f"--model-repository={repo}", *common,
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix0_",
        "--exit-timeout-secs=30",
        ":",
        "-n", "1", "/opt/tritonserver/bin/tritonserver", f"--model-repository={repo}", *common,
        "--model-control-mode=explicit", "--load-model=tensorrt_llm",
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix1_",
        "--exit-timeout-secs=30",
    ]


def test_mpirun_command_four_ranks_each_with_own_shm_prefix(tmp_path: Path) -> None:
    cmd = mpirun_command(ServerSpec(repo=tmp_path, world_size=4), "ts", trtllm_model_names=("a", "b"))
    assert cmd.count("-n") == 4 and cmd.count(":") == 3 and cmd[-1] != ":"
    for rank in range(4):
        assert f"--backend-config=python,shm-region-prefix-name=prefix{rank}_" in cmd
    assert cmd.count("--model-control-mode=explicit") == 3
    assert cmd.count("--load-model=a") == 3 and cmd.count("--load-model=b") == 3


def test_ports_zero_become_distinct_free_ports(tmp_path: Path) -> None:
    spec = resolve_ports(ServerSpec(repo=tmp_path))
    ports = {spec.http_port, spec.grpc_port, spec.metrics_port}
    assert len(ports) == 3 and 0 not in ports


def test_port_in_use_is_refused_before_start(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(InvalidInputError, match=f"Port {port}"):
            resolve_ports(ServerSpec(repo=tmp_path, grpc_port=port))
        assert run(["serve", str(ECHO_REPO), "--grpc-port", str(port), "--http-port", "0", "--metrics-port", "0"]) == 2


def test_missing_or_empty_repo_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        check_repo(ServerSpec(repo=tmp_path / "nope"))
    with pytest.raises(InvalidInputError, match="no model folder"):
        check_repo(ServerSpec(repo=tmp_path))


def test_world_size_needs_the_tensorrtllm_runtime(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError, match="tensorrtllm runtime"):
        check_repo(ServerSpec(repo=ECHO_REPO, world_size=2))
    check_repo(ServerSpec(repo=_trtllm_repo(tmp_path), world_size=2))


def test_load_failures_name_the_model_and_quote_the_line() -> None:
    log = (
        "I1130 03:23:50 model_lifecycle.cc:472] loading: echo:1\n"
        "E1130 03:23:51.1 1 model_lifecycle.cc:654] \"failed to load 'broken' version 1: Internal: "
        "ModuleNotFoundError: No module named 'nope'\"\n"
        "| Model  | Version | Status |\n"
        "| broken | 1       | UNAVAILABLE: Internal: ModuleNotFoundError |\n"
        "| other  | 1       | UNAVAILABLE: Invalid argument: bad dims |\n"
        "| echo   | 1       | READY  |\n"
    )
    failures = load_failures(log)
    assert set(failures) == {"broken", "other"}
    assert "No module named 'nope'" in failures["broken"]
    assert "bad dims" in failures["other"]

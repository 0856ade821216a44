"""pipeline.serve without a server: a ServerSpec's ports and the repository checks before a start.
(Not test_serve.py: tests/integration/test_serve.py has that basename, and pytest imports test files by it.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.serve import ServerSpec, check_repo, resolve_ports

ECHO_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "echo_repo"


def _trtllm_repo(tmp_path: Path) -> Path:
    for name, backend in (("tensorrt_llm", "tensorrtllm"), ("ensemble", None), ("preprocessing", "python")):
        (tmp_path / name).mkdir()
        text = f'name: "{name}"\n' + (f'backend: "{backend}"\n' if backend else 'platform: "ensemble"\n')
        (tmp_path / name / "config.pbtxt").write_text(text)
    return tmp_path


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

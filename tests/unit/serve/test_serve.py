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


def test_a_port_with_only_time_wait_sockets_is_free() -> None:
    """A stopped server's closed connections sit in TIME_WAIT for a minute; tritonserver binds such a port
    (SO_REUSEADDR), so pipeline serve must not refuse it. Only a listener makes a port busy."""
    from pipeline.serve import port_in_use

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    assert port_in_use(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    assert not port_in_use(port)


def _engine_repo(tmp_path: Path, parameters: str) -> Path:
    import json

    engine = tmp_path / "engine"
    engine.mkdir(parents=True)
    (engine / "config.json").write_text(json.dumps({"version": "0.21.0", "build_config": {}}))
    model = tmp_path / "repo" / "tensorrt_llm"
    model.mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "tensorrt_llm"\nbackend: "tensorrtllm"\n'
                                        + parameters.replace("ENGINE", str(engine)))
    return tmp_path / "repo"


def test_check_engine_reads_the_config_as_protobuf_text(tmp_path: Path) -> None:
    """`value {` without a colon is valid protobuf text; the old regex did not match it and skipped the
    engine check, so an engine of another TensorRT-LLM version went on to fail inside the backend."""
    from pipeline.serve import check_engine

    repo = _engine_repo(tmp_path, 'parameters {\n  key: "gpt_model_path"\n  value {\n    string_value: "ENGINE"\n  }\n}\n')
    with pytest.raises(UnsupportedError):
        check_engine(repo)


def test_check_engine_refuses_an_unparsable_or_incomplete_config(tmp_path: Path) -> None:
    from pipeline.serve import check_engine

    with pytest.raises(InvalidInputError, match="does not parse"):
        check_engine(_engine_repo(tmp_path / "a", 'parameters { key: "gpt_model_path" value: { string_value: "ENGINE" '))
    with pytest.raises(InvalidInputError, match="sets no gpt_model_path"):
        check_engine(_engine_repo(tmp_path / "b", ""))

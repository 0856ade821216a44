"""pipeline.serve.commands: tritonserver's command line, mpirun's (the launch_triton_server.py contract), and
trtllm-serve's against the upstream option table (`serve` in TensorRT-LLM 1.1.0's CLI reference, v1.1.0 @48b7b5d8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.serve.commands import mpirun_command, tritonserver_command, trtllm_serve_command, trtllm_serve_option
from pipeline.serve import ServerSpec, new_shm_region_prefix
from pipeline.serve.triton_binary import TritonBinary
from pipeline.serve.trtllm_serve import flags


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


def test_a_servers_own_shm_prefix_names_its_python_backend_regions(tmp_path: Path) -> None:
    """start_server gives every server a prefix of its own (its reaper finds the server's stubs and /dev/shm
    regions by it); single process: one --backend-config, mpirun: the prefix and the rank, as prefix<rank>_."""
    prefix = new_shm_region_prefix()
    assert prefix != new_shm_region_prefix() and prefix.startswith("triton_python_backend_shm_region_pipeline_")
    spec = ServerSpec(repo=tmp_path, shm_region_prefix=prefix)
    assert tritonserver_command(spec, "ts").count(f"--backend-config=python,shm-region-prefix-name={prefix}") == 1
    ranks = mpirun_command(spec.model_copy(update={"world_size": 2}), "ts")
    for rank in range(2):
        assert f"--backend-config=python,shm-region-prefix-name={prefix}rank{rank}_" in ranks
    assert not any("shm-region-prefix" in arg for arg in tritonserver_command(ServerSpec(repo=tmp_path), "ts"))
    with pytest.raises(ValueError):
        ServerSpec(repo=tmp_path, shm_region_prefix="short")  # the reaper refuses a prefix that could match others'


def test_command_line_is_the_upstream_spelling() -> None:
    command = trtllm_serve_command("/models/model", "/models/llm_api_options.yaml", "0.0.0.0", 8000, tp_size=2)
    assert command == ["trtllm-serve", "serve", "/models/model", "--host", "0.0.0.0", "--port", "8000",
                       "--backend", "pytorch", "--tp_size", "2", "--pp_size", "1",
                       "--extra_llm_api_options", "/models/llm_api_options.yaml"]


def test_every_option_is_in_the_upstream_table_with_a_value_where_it_takes_one() -> None:
    command = trtllm_serve_command("m", "o.yaml", tp_size=4, pp_size=2)
    table = flags()
    args = command[3:]
    while args:
        name = args.pop(0)
        assert name in table, name
        flag = table[name]
        if flag.value != "flag":
            value = args.pop(0)
            assert not value.startswith("--"), (name, value)
            if flag.choices:
                assert value in flag.choices
            if flag.value == "int":
                int(value)


def test_unknown_options_and_choices_are_bugs() -> None:
    with pytest.raises(ValueError, match="--backend"):
        trtllm_serve_option("--backend", "onnx")
    with pytest.raises(ValueError, match="--config"):
        trtllm_serve_option("--config", "o.yaml")  # the alias of later releases; 1.1.0 has --extra_llm_api_options only

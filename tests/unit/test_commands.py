"""pipeline.commands: trtllm-serve's command line against the upstream option table
(tensorrt_llm/commands/serve.py @4c05a748). tritonserver's and mpirun's: tests/unit/test_serve_command.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pipeline.commands import trtllm_serve_command, trtllm_serve_option
from pipeline.trtllm_serve import flags


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


def test_installed_trtllm_serve_knows_every_option_we_pass() -> None:
    """On the GPU image: the real `trtllm-serve serve --help` lists every option the builder emits."""
    binary = shutil.which("trtllm-serve")
    if binary is None:
        pytest.skip("trtllm-serve is not installed here (TensorRT-LLM only installs in the GPU image)")
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=300).stdout
    for arg in trtllm_serve_command("m", "o.yaml"):
        if arg.startswith("--"):
            assert arg in help_text, arg

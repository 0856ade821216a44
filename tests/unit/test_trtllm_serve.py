"""trtllm-serve's command line against the upstream option table (tensorrt_llm/commands/serve.py @4c05a748)."""

from __future__ import annotations

import importlib.resources
import shutil
import subprocess

import pytest

from pipeline.trtllm_serve import (
    PROMETHEUS_PATH,
    SOURCE_COMMIT,
    exported_series,
    flags,
    metric_families,
    trtllm_serve_command,
)


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


def test_the_table_is_upstreams_serve_command() -> None:
    """The options the pipeline relies on, as `trtllm-serve serve` @4c05a748 declares them."""
    table = flags()
    assert table["MODEL"].value == "positional"
    assert (table["--host"].default, table["--port"].default) == ("localhost", "8000")  # a pod must pass 0.0.0.0
    assert table["--backend"].choices == ("pytorch", "tensorrt", "_autodeploy") and table["--backend"].default == "pytorch"
    assert table["--tp_size"].value == table["--pp_size"].value == "int"
    assert table["--extra_llm_api_options"].value == "str"
    assert table["--trust_remote_code"].value == "flag"
    assert not any(name.startswith("--") and "-" in name[2:] for name in table), "upstream spells options with underscores"
    header = importlib.resources.files("pipeline.data").joinpath("trtllm_serve_flags.tsv").read_text().splitlines()[0]
    assert SOURCE_COMMIT in header


def test_unknown_options_and_choices_are_bugs() -> None:
    from pipeline.trtllm_serve import _option

    with pytest.raises(ValueError, match="--backend"):
        trtllm_serve_command("m", "o.yaml", backend="onnx")
    with pytest.raises(ValueError, match="--config"):
        _option("--config", "o.yaml")  # the alias of later releases; 1.1.0 has --extra_llm_api_options only


def test_metric_table() -> None:
    assert metric_families() == {
        "request_success_total": "counter", "e2e_request_latency_seconds": "histogram",
        "time_to_first_token_seconds": "histogram", "time_per_output_token_seconds": "histogram",
        "request_queue_time_seconds": "histogram"}
    assert "time_to_first_token_seconds_bucket" in exported_series() and "request_success_total" in exported_series()
    assert PROMETHEUS_PATH == "/prometheus/metrics"


def test_installed_trtllm_serve_knows_every_option_we_pass() -> None:
    """On the GPU image: the real `trtllm-serve serve --help` lists every option the builder emits."""
    binary = shutil.which("trtllm-serve")
    if binary is None:
        pytest.skip("trtllm-serve is not installed here (TensorRT-LLM only installs in the GPU image)")
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=300).stdout
    for arg in trtllm_serve_command("m", "o.yaml"):
        if arg.startswith("--"):
            assert arg in help_text, arg

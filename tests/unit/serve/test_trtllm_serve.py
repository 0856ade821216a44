"""trtllm-serve's upstream tables (the options of `serve` in TensorRT-LLM 1.1.0's CLI reference): its options and its
Prometheus families."""

from __future__ import annotations

import importlib.resources

from pipeline.serve.trtllm_serve import PROMETHEUS_PATH, SOURCE_COMMIT, exported_series, flags, metric_families


def test_the_table_is_upstreams_serve_command() -> None:
    """The options the pipeline relies on, as `trtllm-serve serve` of 1.1.0 declares them."""
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


def test_metric_table() -> None:
    assert metric_families() == {
        "request_success_total": "counter", "e2e_request_latency_seconds": "histogram",
        "time_to_first_token_seconds": "histogram", "time_per_output_token_seconds": "histogram",
        "request_queue_time_seconds": "histogram"}
    assert "time_to_first_token_seconds_bucket" in exported_series() and "request_success_total" in exported_series()
    assert PROMETHEUS_PATH == "/prometheus/metrics"


# The options of `serve` in 1.1.0's CLI reference (NVIDIA/TensorRT-LLM gh-pages @8660c119,
# 1.1.0/commands/trtllm-serve/trtllm-serve.html, generated from v1.1.0 @48b7b5d8), in the page's order.
RELEASE_1_1_0_OPTIONS = (
    "MODEL", "--tokenizer", "--host", "--port", "--backend", "--log_level", "--max_beam_width", "--max_batch_size",
    "--max_num_tokens", "--max_seq_len", "--tp_size", "--pp_size", "--ep_size", "--cluster_size", "--gpus_per_node",
    "--kv_cache_free_gpu_memory_fraction", "--num_postprocess_workers", "--trust_remote_code", "--extra_llm_api_options",
    "--reasoning_parser", "--metadata_server_config_file", "--server_role", "--fail_fast_on_attention_window_too_large")


def test_the_table_is_1_1_0s_option_set_not_a_later_one() -> None:
    """A later serve.py added --disagg_cluster_uri, --enable_chunked_prefill and --media_io_kwargs; 1.1.0 has none of them,
    so a command using one would be refused by the pinned image's trtllm-serve."""
    assert tuple(flags()) == RELEASE_1_1_0_OPTIONS
    assert SOURCE_COMMIT == "48b7b5d8b7ed1e6bff57aecc6ff7d1533288bed8"  # v1.1.0 (tensorrtllm_backend v1.1.0 pins it)
    assert flags()["--reasoning_parser"].choices == ("deepseek-r1",)
    assert flags()["--log_level"].choices == ("internal_error", "error", "warning", "info", "verbose", "debug", "trace")

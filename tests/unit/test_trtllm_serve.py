"""trtllm-serve's upstream tables (tensorrt_llm/commands/serve.py @4c05a748): its options and its Prometheus families."""

from __future__ import annotations

import importlib.resources

from pipeline.trtllm_serve import PROMETHEUS_PATH, SOURCE_COMMIT, exported_series, flags, metric_families


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


def test_metric_table() -> None:
    assert metric_families() == {
        "request_success_total": "counter", "e2e_request_latency_seconds": "histogram",
        "time_to_first_token_seconds": "histogram", "time_per_output_token_seconds": "histogram",
        "request_queue_time_seconds": "histogram"}
    assert "time_to_first_token_seconds_bucket" in exported_series() and "request_success_total" in exported_series()
    assert PROMETHEUS_PATH == "/prometheus/metrics"

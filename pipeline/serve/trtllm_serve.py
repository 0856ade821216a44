"""`trtllm-serve`: TensorRT-LLM's OpenAI-compatible server, as the pinned release (1.1.0) spells it.

The upstream facts its command line (pipeline/serve/commands.py: `trtllm_serve_command`, for `pipeline serve
--api openai` on a GPU and the pods of `pipeline k8s render --api openai`) is checked against: the option
table in pipeline/data/trtllm_serve_flags.tsv, the options of `serve` in 1.1.0's published CLI reference
(v1.1.0 = NVIDIA/TensorRT-LLM @48b7b5d8; the table's header says how it was read).

What the server answers (tensorrt_llm/serve/openai_server.py; the index stores it only at later commits,
@e7f7345e31e5 among them, so each point says what ties it to 1.1.0):
- `/health`: 200 once the HTTP server runs, which is after `LLM(...)` has loaded the model
  (launch_server builds the LLM first, then starts uvicorn); `/health_generate` runs a one-token chat
  generation (too costly for a probe).
- `/metrics`: JSON iteration statistics (needs `enable_iter_perf_stats`; each poll drains the queue),
  not the Prometheus text format: nothing to scrape. 1.1.0's CLI reference documents this endpoint
  (section "Metrics Endpoint") and no other metrics endpoint.
- `/prometheus/metrics`: the Prometheus families of pipeline/data/trtllm_serve_metrics.tsv, mounted
  only when the LLM-API option `return_perf_metrics` is true (`OpenAIServer.register_routes`). The route,
  that option and tensorrt_llm/metrics/collector.py came in one change, NVIDIA/TensorRT-LLM PR #5785
  (merged to main in August 2025); 1.1.0 has the option (BaseLlmArgs.return_perf_metrics in 1.1.0's
  llm_args.py, pipeline/data/trtllm_llm_args.tsv) and the collector (NVIDIA Dynamo's TensorRT-LLM
  metrics page: 1.1.0rc5 exports its five families), so it has the route.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from functools import lru_cache

from pipeline.data import fact_rows

SOURCE_COMMIT = "48b7b5d8b7ed1e6bff57aecc6ff7d1533288bed8"  # v1.1.0, whose CLI reference the option table is read from
BINARY = "trtllm-serve"
SUBCOMMAND = "serve"  # `trtllm-serve MODEL` resolves to it too (DefaultGroup); named for clarity
HEALTH_PATH = "/health"
PROMETHEUS_PATH = "/prometheus/metrics"
ITERATION_STATS_PATH = "/metrics"
DEFAULT_PORT = 8000
MONITORING_OPTIONS = {"return_perf_metrics": True}
"""LLM-API options (BaseLlmArgs fields) without which /prometheus/metrics is not mounted."""


@dataclass(frozen=True)
class Flag:
    name: str
    value: str  # positional | str | int | float | choice | flag
    default: str
    choices: tuple[str, ...]


def _table(name: str) -> list[dict[str, str]]:
    return fact_rows(importlib.resources.files("pipeline.data").joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def flags() -> dict[str, Flag]:
    """`trtllm-serve serve`'s options by name (the upstream table)."""
    table = {}
    for row in _table("trtllm_serve_flags.tsv"):
        choices = tuple(row["choices"].split("|")) if row["value"] == "choice" and row["choices"] else ()
        table[row["flag"]] = Flag(row["flag"], row["value"], row["default"], choices)
    return table


@lru_cache(maxsize=1)
def metric_families() -> dict[str, str]:
    """Prometheus family -> type, as /prometheus/metrics exports them (histograms as _bucket/_sum/_count)."""
    return {row["family"]: row["type"] for row in _table("trtllm_serve_metrics.tsv")}


def exported_series() -> set[str]:
    names: set[str] = set()
    for family, kind in metric_families().items():
        names |= {f"{family}_{s}" for s in ("bucket", "sum", "count")} if kind == "histogram" else {family}
    return names

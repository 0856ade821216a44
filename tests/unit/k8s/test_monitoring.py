"""pipeline.k8s.monitoring: the metric families the dashboard and rules use exist, and the autoscaler
reads the adapter's metric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pipeline.k8s import TRITON_CORE_METRICS

from k8s_cases import all_docs, one, render


def exported_metric_names(reference_tsv) -> set[str]:
    names = set(TRITON_CORE_METRICS)
    for row in reference_tsv("triton_trtllm_metrics.tsv"):
        family = row["metric_family"]
        names.add(family)
        if row["type"] == "histogram":
            names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
    names |= {f"nv_inference_first_response_histogram_ms_{s}" for s in ("bucket", "sum", "count")}
    return names


def test_monitoring_uses_exported_metrics(build_root: Path, reference_tsv) -> None:
    _, folder = render(build_root, "h100-tp2")
    rule = one(folder, "PrometheusRule")["spec"]["groups"][0]["rules"][0]
    expr = " ".join(rule["expr"].split())
    assert re.search(r'nv_trt_llm_request_metrics\{[^}]*request_type="active"[^}]*\}', expr) and "rate(" not in expr
    configmaps = {d["metadata"]["name"]: d for d in all_docs(folder) if d["kind"] == "ConfigMap"}
    board = json.loads(next(v for d in configmaps.values() for k, v in d["data"].items() if k.endswith(".json")))
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]] + [rule["expr"]]
    used = {m for e in exprs for m in re.findall(r"\b(nv_[a-z0-9_]+)", e)}
    assert used <= exported_metric_names(reference_tsv), used - exported_metric_names(reference_tsv)
    text = " ".join(exprs)
    for family in ("nv_inference_first_response_histogram_ms", "nv_trt_llm_request_metrics",
                   "nv_trt_llm_kv_cache_block_metrics", "nv_gpu_memory_used_bytes", "nv_trt_llm_runtime_memory_metrics",
                   "nv_llm_output_token_len"):
        assert family in text, family
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for word in ("first token", "per output token", "queue vs compute", "in flight", "kv-cache", "gpu memory"):
        assert word in titles, word


def test_hpa_reads_the_adapter_metric(build_root: Path) -> None:
    _, folder = render(build_root, "h100-tp1", replicas=2, min_replicas=1, max_replicas=6)
    hpa = one(folder, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 6)
    metric = hpa["metrics"][0]["pods"]["metric"]["name"]
    adapter = next(d for d in all_docs(folder) if d["metadata"]["name"].endswith("prometheus-adapter-rules"))
    rules = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    record = one(folder, "PrometheusRule")["spec"]["groups"][0]["rules"][0]["record"]
    assert rules[0]["name"]["as"] == metric and rules[0]["seriesQuery"].startswith(record + "{")
    assert one(folder, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert one(folder, "Deployment")["spec"]["replicas"] == 2


# ---------------------------------------------------------------------------------------------
# The data files: recording rules and dashboards with a few values filled in
# ---------------------------------------------------------------------------------------------


def test_fill_replaces_every_placeholder_and_refuses_an_unknown_one() -> None:
    from pipeline.k8s.monitoring import fill

    template = {"a": ["x %{ns} y", {"b": "%{job}"}], "n": 3, "grafana": "${datasource} {{pod}}"}
    assert fill(template, {"ns": "llm", "job": "llm/t"}) == {"a": ["x llm y", {"b": "llm/t"}], "n": 3,
                                                                "grafana": "${datasource} {{pod}}"}
    with pytest.raises(KeyError, match="%{job}"):
        fill("%{job}", {})


def test_templates_name_only_the_values_the_renderer_fills() -> None:
    from pipeline.k8s.monitoring import DASHBOARDS, SCALING_RULES, data_text, scaling_rules

    filled = {"ns", "job", "name", "uid", "model", "profile", "max_batch_size"}
    for name in DASHBOARDS:
        board = json.loads(data_text(name))
        assert set(re.findall(r"%\{(\w+)\}", data_text(name))) <= filled, name
        assert board["uid"] == "%{uid}" and board["templating"]["list"][0]["name"] == "datasource"
    rules = scaling_rules()
    assert set(rules) == {"ensemble", "llmapi", "openai"}
    for serving, rule in rules.items():
        assert set(rule) == {"record", "metric", "target", "target_share", "expr"}, serving
        assert 0 < rule["target_share"] <= 1, serving
        assert rule["target"] in ("queue_ratio_target", "max_batch_size")
        assert set(re.findall(r"%\{(\w+)\}", rule["expr"])) == {"ns", "job"}, serving
    assert "%{" not in SCALING_RULES


def test_dashboards_show_the_recorded_series_the_autoscaler_reads(build_root: Path) -> None:
    from pipeline.k8s.monitoring import INFLIGHT_RECORD

    _, folder = render(build_root, "h100-tp1", namespace="llm")
    board = next(json.loads(v) for d in all_docs(folder) if d["kind"] == "ConfigMap"
                 for k, v in d["data"].items() if k.endswith(".json"))
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert any(e.startswith(f'{INFLIGHT_RECORD}{{namespace="llm",') for e in exprs)
    assert "%{" not in json.dumps(board)


# ---------------------------------------------------------------------------------------------
# The autoscaler's series: a real in-flight count on every runtime
# ---------------------------------------------------------------------------------------------

TARGET = {"namespace": "llm", "pod": "triton-0", "job": "llm/triton"}


def rule_value(serving: str, texts: list[tuple[float, str]]) -> float:
    from pipeline.k8s.monitoring import fill, scaling_rules
    from promql_eval import Series, evaluate, only_value

    series = Series(TARGET)
    for time_s, text in texts:
        series.add(time_s, text)
    return only_value(evaluate(fill(scaling_rules()[serving]["expr"], {"ns": "llm", "job": "llm/triton"}), series))


def cpp_backend_scrape(active: int, waiting: int = 0, duration_us: int = 0) -> str:
    """/metrics of Triton with the C++ tensorrtllm backend: its request family (label values from
    ../shared/reference/triton_trtllm_metrics.tsv) and Triton's request duration counter."""
    labels = 'model="tensorrt_llm",version="1"'
    rows = [f'nv_trt_llm_request_metrics{{{labels},request_type="{kind}"}} {value}'
            for kind, value in (("active", active), ("max", 8), ("scheduled", active - waiting), ("context", 1),
                                ("waiting", waiting))]
    rows.append(f'nv_inference_request_duration_us{{{labels}}} {duration_us}')
    return "# TYPE nv_trt_llm_request_metrics gauge\n" + "\n".join(rows) + "\n"


def test_engine_rule_reads_the_cpp_backends_active_requests(reference_tsv) -> None:
    kinds = next(r for r in reference_tsv("triton_trtllm_metrics.tsv") if r["metric_family"] == "nv_trt_llm_request_metrics")
    assert "active" in kinds["label_values"].split("|") and kinds["label_key"] == "request_type"
    assert rule_value("ensemble", [(0.0, cpp_backend_scrape(active=6, waiting=2))]) == 6
    assert rule_value("ensemble", [(0.0, cpp_backend_scrape(active=0))]) == 0


def test_python_models_gauge_wins_where_a_pod_exports_both() -> None:
    """The reference runtime exports the C++ backend's families and ours: ours counts the requests waiting
    for admission too."""
    text = cpp_backend_scrape(active=4) + 'pipeline_requests_in_flight{model="tensorrt_llm",version="1"} 7\n'
    assert rule_value("ensemble", [(0.0, text)]) == 7
    assert rule_value("llmapi", [(0.0, 'pipeline_requests_in_flight{model="tensorrt_llm",version="1"} 3\n')]) == 3


def test_the_family_the_rules_read_is_the_one_our_models_export() -> None:
    from pipeline.k8s.monitoring import IN_FLIGHT_FAMILY, scaling_rules

    root = Path(__file__).resolve().parents[3] / "model_repo_templates"
    for path in (root / "tensorrt_llm" / "1" / "model.py", root / "llmapi" / "tensorrt_llm" / "1" / "model.py"):
        text = path.read_text(encoding="utf-8")
        assert re.search(rf'MetricFamily\(name="{IN_FLIGHT_FAMILY}", kind=pb_utils\.MetricFamily\.GAUGE', text), path
    for serving in ("ensemble", "llmapi"):
        assert f"{IN_FLIGHT_FAMILY}{{" in scaling_rules()[serving]["expr"], serving


def test_hpa_target_is_a_share_of_the_batch_the_count_stops_at(build_root: Path) -> None:
    """The C++ backend's active count stops at the engine's batch size, so a target at it could never be
    exceeded: the target is 0.8 x max_batch_size (8 for these engines)."""
    _, folder = render(build_root, "h100-tp1")
    target = one(folder, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    assert target == "6400m"

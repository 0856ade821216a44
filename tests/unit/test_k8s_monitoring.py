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
    assert re.search(r"rate\(nv_inference_queue_duration_us\{[^}]*\}\[1m\]\).*/.*rate\(nv_inference_compute_infer_duration_us\{[^}]*\}\[1m\]\)", expr)
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
        assert set(rule) == {"record", "metric", "target", "expr"}, serving
        assert rule["target"] in ("queue_ratio_target", "max_batch_size")
        assert set(re.findall(r"%\{(\w+)\}", rule["expr"])) == {"ns", "job"}, serving
    assert "%{" not in SCALING_RULES


def test_dashboards_show_the_recorded_series_the_autoscaler_reads(build_root: Path) -> None:
    from pipeline.k8s.monitoring import RATIO_RECORD

    _, folder = render(build_root, "h100-tp1", namespace="llm")
    board = next(json.loads(v) for d in all_docs(folder) if d["kind"] == "ConfigMap"
                 for k, v in d["data"].items() if k.endswith(".json"))
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert any(e.startswith(f'{RATIO_RECORD}{{namespace="llm",') for e in exprs)
    assert "%{" not in json.dumps(board)

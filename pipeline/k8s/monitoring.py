"""What Prometheus scrapes (PodMonitor), records (PrometheusRule) and the autoscaler reads (prometheus-adapter
rule, HorizontalPodAutoscaler), and the Grafana dashboard, for each server.

The recording rules and the dashboards are data files with a few values filled in (`%{name}`: the
namespace, the PodMonitor's job label, the resource name, the model and profile, max_batch_size):
pipeline/data/k8s/scaling_rules.yaml and dashboard_<serving>.json. The autoscaler reads, per pod:
- Triton, every runtime (engine, reference, LLM-API): requests in flight in the tensorrt_llm model, against
  a share of max_batch_size (the engine's or the LLM-API options'): our Python models' own gauge
  (IN_FLIGHT_FAMILY), or the C++ backend's active requests (scaling_rules.yaml says why not Triton's
  request or queue durations). The LLM-API model exports no other nv_trt_llm_* or nv_llm_* family;
- trtllm-serve: request_queue_time_seconds over (e2e latency - queue time), the five families of
  pipeline/data/trtllm_serve_metrics.tsv.
TTFT on the engine dashboard is Triton's nv_inference_first_response_histogram_ms (decoupled models,
--metrics-config=histogram_latencies=true); neither Triton nor the TensorRT-LLM backend exports time per
output token, so that panel derives the mean from request duration minus first-response time over output
tokens (nv_llm_output_token_len)."""

from __future__ import annotations

import importlib.resources
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from pipeline.k8s.layout import Ctx, milli
from pipeline.k8s.spec import LWS_API, MONITORING_API
from pipeline.serve.trtllm_serve import PROMETHEUS_PATH


HPA_MODEL = "tensorrt_llm"  # the model whose Triton queue feeds the in-flight batcher
# Triton core metric families the dashboard and rules use (Triton's docs, user_guide/metrics.md).
# The TensorRT-LLM backend's own families are in shared/reference/triton_trtllm_metrics.tsv.
TRITON_CORE_METRICS = frozenset({
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_pending_request_count", "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us",
    "nv_inference_first_response_histogram_ms", "nv_gpu_utilization", "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes", "nv_gpu_power_usage",
})
# The gauge our Python tensorrt_llm models export (model_repo_templates/tensorrt_llm/1/model.py and
# llmapi/tensorrt_llm/1/model.py write the name: they cannot import the pipeline in NVIDIA's image).
IN_FLIGHT_FAMILY = "pipeline_requests_in_flight"
SCALING_RULES = "scaling_rules.yaml"
DASHBOARDS = ("dashboard_ensemble.json", "dashboard_llmapi.json", "dashboard_openai.json")
_PLACEHOLDER = re.compile(r"%\{(\w+)\}")


def data_text(name: str) -> str:
    """A file of pipeline/data/k8s/ (in the wheel as in a checkout)."""
    return importlib.resources.files("pipeline.data").joinpath("k8s").joinpath(name).read_text(encoding="utf-8")


def fill(template: Any, values: dict[str, str]) -> Any:
    """The template (strings, lists, dicts) with every %{name} in its strings replaced by values[name].
    A name without a value is a bug in the renderer, never left in the output."""

    def value(match: re.Match[str]) -> str:
        if match.group(1) not in values:
            raise KeyError(f"template value %{{{match.group(1)}}} is not given")
        return values[match.group(1)]

    if isinstance(template, dict):
        return {key: fill(item, values) for key, item in template.items()}
    if isinstance(template, list):
        return [fill(item, values) for item in template]
    return _PLACEHOLDER.sub(value, template) if isinstance(template, str) else template


@lru_cache(maxsize=1)
def scaling_rules() -> dict[str, dict[str, str]]:
    """Serving -> {record, metric, target, expr}: pipeline/data/k8s/scaling_rules.yaml."""
    return yaml.safe_load(data_text(SCALING_RULES))


INFLIGHT_RECORD = scaling_rules()["ensemble"]["record"]
INFLIGHT_METRIC = scaling_rules()["llmapi"]["metric"]
OPENAI_RATIO_METRIC = scaling_rules()["openai"]["metric"]


@dataclass(frozen=True)
class Scaling:
    """What the autoscaler reads: a recorded per-pod series, its adapter name, and the target per pod."""

    record: str
    metric: str
    expr: str
    target: str


def max_batch_size(ctx: Ctx) -> int:
    """The LLM-API options' max_batch_size (Served), else the engine's (its profile)."""
    return max(1, ctx.served.max_batch_size or ctx.profile.max_batch_size)


def scaling(ctx: Ctx) -> Scaling:
    """The serving's rule of scaling_rules.yaml, for this namespace and PodMonitor job."""
    rule = scaling_rules()[ctx.served.serving]
    if rule["target"] == "max_batch_size":
        value = max_batch_size(ctx)
    else:
        value = ctx.spec.queue_ratio_target
    target = milli(value * float(rule["target_share"]))
    return Scaling(rule["record"], rule["metric"], fill(rule["expr"], {"ns": ctx.ns, "job": ctx.job}), target)


def metrics_endpoint(ctx: Ctx) -> dict[str, str]:
    """Where Prometheus scrapes a serving pod: Triton's metrics port, or trtllm-serve's HTTP port."""
    if ctx.openai:
        return {"port": "http", "path": PROMETHEUS_PATH}
    return {"port": "metrics", "path": "/metrics"}


def pod_monitor(ctx: Ctx) -> dict[str, Any]:
    return {"apiVersion": MONITORING_API, "kind": "PodMonitor", "metadata": ctx.meta(),
            "spec": {"selector": {"matchLabels": dict(ctx.serving_selector)},
                     "podMetricsEndpoints": [{**metrics_endpoint(ctx), "interval": "15s"}]}}


def prometheus_rule(ctx: Ctx) -> dict[str, Any]:
    scale = scaling(ctx)
    return {"apiVersion": MONITORING_API, "kind": "PrometheusRule", "metadata": ctx.meta(),
            "spec": {"groups": [{"name": f"{ctx.name}.rules", "interval": "15s", "rules": [
                {"record": scale.record, "expr": scale.expr,
                 "labels": {"deployment": ctx.name}},
            ]}]}}


def adapter_config(ctx: Ctx) -> dict[str, Any]:
    """prometheus-adapter rule exposing the recorded series as the per-pod custom metric the HPA reads."""
    scale = scaling(ctx)
    rules = {"rules": [{
        "seriesQuery": f'{scale.record}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{re.escape(scale.record)}$", "as": scale.metric},
        "metricsQuery": "max(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
    }]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ctx.meta(f"{ctx.name}-prometheus-adapter-rules"),
            "data": {"config.yaml": yaml.safe_dump(rules, sort_keys=False)}}


def hpa(ctx: Ctx) -> dict[str, Any]:
    low, high = ctx.spec.hpa_bounds
    scale = scaling(ctx)
    target = ({"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": ctx.name} if ctx.lws
              else {"apiVersion": "apps/v1", "kind": "Deployment", "name": ctx.name})
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": ctx.meta(),
            "spec": {"scaleTargetRef": target, "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": scale.metric},
                                                           "target": {"type": "AverageValue",
                                                                      "averageValue": scale.target}}}],
                     # engines take minutes to load: add one replica at a time, remove slowly
                     "behavior": {"scaleUp": {"stabilizationWindowSeconds": 60,
                                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}]},
                                  "scaleDown": {"stabilizationWindowSeconds": 600,
                                                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]}}}}


def dashboard(ctx: Ctx) -> dict[str, Any]:
    """The Grafana dashboard of this serving: pipeline/data/k8s/dashboard_<serving>.json, filled in."""
    values = {"ns": ctx.ns, "job": ctx.job, "name": ctx.name, "uid": ctx.name[:40], "model": ctx.profile.model,
              "profile": ctx.profile.name, "max_batch_size": str(max_batch_size(ctx))}
    return fill(json.loads(data_text(f"dashboard_{ctx.served.serving}.json")), values)


def dashboard_configmap(ctx: Ctx) -> dict[str, Any]:
    meta = ctx.meta(f"{ctx.name}-dashboard")
    meta["labels"]["grafana_dashboard"] = "1"  # picked up by the Grafana sidecar (kube-prometheus-stack)
    board = dashboard(ctx)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {f"{ctx.name}.json": json.dumps(board, indent=2, ensure_ascii=False) + "\n"}}

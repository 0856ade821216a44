"""The series the autoscaler reads, from served CPU repositories under load: the recording rule's PromQL
(pipeline/data/k8s/scaling_rules.yaml) evaluated over what tritonserver's /metrics said while several long
streams ran. It counts the requests in flight; the Little's-law estimate the LLM-API rule used before
(rate(nv_inference_request_duration_us) / 1e6) stays near 0 under the same load, because python_backend
reports a request's duration when `execute` returns, and ours returns at once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inflight_load import load_and_scrape  # noqa: E402
from llmapi_helpers import build_cpu_deployable  # noqa: E402
from promql_eval import Series, evaluate, only_value  # noqa: E402

pytestmark = pytest.mark.server

STREAMS = 4
TARGET = {"namespace": "llm", "pod": "triton-0", "job": "llm/triton"}


def littles_law(counter: str) -> str:
    """Requests in a Triton duration counter's state on average (its rate in seconds per second): the old
    LLM-API rule with nv_inference_request_duration_us; queue and compute time are what the old engine rule
    (their ratio) read."""
    return (f'sum by (namespace, pod) (rate({counter}{{namespace="{TARGET["namespace"]}",job="{TARGET["job"]}",'
            f'model="tensorrt_llm"}}[1m])) / 1e6')


OLD_LLMAPI_RULE = littles_law("nv_inference_request_duration_us")
OLD_ENGINE_SERIES = (littles_law("nv_inference_queue_duration_us"), littles_law("nv_inference_compute_infer_duration_us"))


def rule(serving: str) -> str:
    from pipeline.k8s.monitoring import fill, scaling_rules

    return fill(scaling_rules()[serving]["expr"], {"ns": TARGET["namespace"], "job": TARGET["job"]})


def check_counts(serving: str, series: Series, streams, scrapes, old: tuple[str, ...] = (OLD_LLMAPI_RULE,)) -> None:
    assert all(s.error is None for s in streams), [s.error for s in streams]
    clear = [(scrape, t) for scrape, (t, _) in zip(scrapes, series.scrapes) if scrape.ambiguous == 0]
    busy = [(scrape, t) for scrape, t in clear if scrape.running == STREAMS]
    assert len(busy) >= 3, f"too few scrapes with all {STREAMS} streams surely running: {scrapes}"
    for scrape, t in clear:  # every scrape that can be judged, the idle one at the end included
        assert only_value(evaluate(rule(serving), series, at=t)) == scrape.running, (scrape, t)
    # the old estimates over the same samples, at the last busy scrape (its rate window holds the load)
    for expr in old:
        value = only_value(evaluate(expr, series, at=busy[-1][1]))
        assert value < 0.05 * STREAMS, (expr, value)


@pytest.fixture(scope="module")
def llmapi_repo_server(demo_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The demo's CPU PyTorch-backend deployable, rendered into the LLM-API layout and served."""
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    root = tmp_path_factory.mktemp("inflight")
    repo = render(RenderSpec(engine=build_cpu_deployable(demo_hf_dir), out=root / "repo")).repo
    with start_server(ServerSpec(repo=repo, log_file=root / "tritonserver.log", ready_timeout_s=600,
                                 exit_timeout_s=5)) as server:
        yield server


def test_llmapi_rule_counts_the_running_streams(llmapi_repo_server) -> None:
    from pipeline.clients.triton import GenerateRequest, build_llmapi_inputs

    prompt = "Count from 1 to 100, separated by commas: 1, 2, 3,"
    requests = [build_llmapi_inputs(GenerateRequest(prompt, max_tokens=120, stream=True)) for _ in range(STREAMS)]
    series = Series(TARGET)
    streams, scrapes = load_and_scrape(llmapi_repo_server.grpc_url, "tensorrt_llm", requests,
                                       llmapi_repo_server.metrics_url, series)
    check_counts("llmapi", series, streams, scrapes)


def test_reference_ensemble_rule_counts_the_running_streams(demo_server) -> None:
    from pipeline.clients.triton import GenerateRequest, build_inputs

    request = GenerateRequest("Tell me a long story about a lighthouse keeper.", max_tokens=80, min_tokens=80,
                              stream=True)
    series = Series(TARGET)
    streams, scrapes = load_and_scrape(demo_server.grpc_url, "ensemble", [build_inputs(request)] * STREAMS,
                                       demo_server.metrics_url, series)
    # nor did the engine's old rule see the load: Triton's queue and compute time both say ~0 requests
    check_counts("ensemble", series, streams, scrapes, old=(OLD_LLMAPI_RULE, *OLD_ENGINE_SERIES))

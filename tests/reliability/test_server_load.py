"""Load on the CPU server: a soak without loss and with stable memory, queue overflow answered fast
with a clear error, and cancelled streams giving their batch slots back.

The 30-second soak runs in `make test` (marked triton + slow) on the shared session server, first in
this module; `make soak` runs scripts/soak.py for 10 minutes at concurrency 32. The queue-overflow
test starts its own queue-limited server for that test only. Cancellation is shown where Triton 2.51
delivers it (BLS and direct tensorrt_llm requests); through the ensemble it does not reach the model
(documented in README, asserted below), so no test here leaves cancelled ensemble streams holding the
shared server's slots.
"""

from __future__ import annotations

import importlib.util
import queue
import re
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import runtime_metrics, wait_busy

pytestmark = pytest.mark.server

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
QUEUE_SIZE = 2
QUEUE_TIMEOUT_US = 300_000


def _soak_module():
    spec = importlib.util.spec_from_file_location("soak_script", SCRIPTS / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.soak
def test_soak_30s_concurrency_32(demo_server) -> None:
    soak = _soak_module()
    summary = soak.soak(demo_server.grpc_url, duration_s=30, concurrency=32, server_pid=demo_server.pid,
                        sample_every_s=2)  # soak.DEFAULT_ISL / DEFAULT_OSL: short requests the CPU keeps up with
    print({k: v for k, v in summary.items() if k != "rss_samples_mib"})
    assert summary["requests_recorded"] >= 32, summary
    assert summary["errors"] == 0, summary["error_examples"]
    assert summary["lost"] == 0, summary
    assert summary["rss_stable"], summary


def _stream(url: str, model: str, inputs: list):
    """Start one streamed request; returns (client, events queue). The caller stops the stream."""
    import tritonclient.grpc as grpcclient

    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result=None, error=None: events.put((time.monotonic(), result, error)))
    client.async_stream_infer(model, inputs, request_id=uuid.uuid4().hex[:8], enable_empty_final_response=True)
    return client, events


def _text_inputs(prompt: str, max_tokens: int, **options) -> list:
    from pipeline.clients.triton import GenerateRequest, build_inputs

    return build_inputs(GenerateRequest(prompt=prompt, max_tokens=max_tokens, stream=True, **options))


def _finish(events: queue.Queue, timeout_s: float) -> tuple[str | None, int, float]:
    """Wait for the final response: (error, responses, seconds waited)."""
    from pipeline.clients.triton import is_final

    started, responses = time.monotonic(), 0
    while True:
        _, result, error = events.get(timeout=timeout_s)
        if error is not None:
            return (error.message() if hasattr(error, "message") else str(error)), responses, time.monotonic() - started
        responses += 1
        if is_final(result):
            return None, responses, time.monotonic() - started


@pytest.fixture()
def queue_server(demo_engine: Path, session_build_root: Path):
    """The demo engine rendered with max_queue_size=QUEUE_SIZE and a 0.3 s queue timeout, served for
    one test (a second server only while it is needed)."""
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    repo = render(RenderSpec(engine=demo_engine, runtime="reference", out=session_build_root / "reliability" / "queue-repo",
                             max_queue_size=QUEUE_SIZE, queue_timeout_us=QUEUE_TIMEOUT_US, bls_instances=1)).repo
    # the burst's cancelled ensemble streams stay in flight (README, "Cancellation"): a 5 s exit timeout, not 30
    spec = ServerSpec(repo=repo, log_file=session_build_root / "logs" / "queue-tritonserver.log", ready_timeout_s=600,
                      warmup=True, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server


def test_queue_overflow_is_refused_fast(queue_server) -> None:
    """max_queue_size 2 with 8 batch slots: a burst of 40 long requests gets some clear refusals
    quickly (rejected or timed out in the queue), never a hang, and the server serves afterwards."""
    from pipeline.clients.triton import generate

    burst = 40
    results: list[tuple[str | None, float]] = [None] * burst  # type: ignore[list-item]

    def one(i: int) -> None:
        client, events = _stream(queue_server.grpc_url, "ensemble", _text_inputs(f"Story number {i}: once upon a time", 16))
        try:
            error, _, seconds = _finish(events, 300)
            results[i] = (error, seconds)
        finally:
            client.stop_stream(cancel_requests=True)
            client.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(burst)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=400)
    assert all(r is not None for r in results), "some requests never finished"
    refused = [(e, s) for e, s in results if e is not None]
    served = [(e, s) for e, s in results if e is None]
    print(f"queue {QUEUE_SIZE}: {len(served)} served, {len(refused)} refused; first refusals: "
          f"{sorted(set(e for e, _ in refused))[:3]}")
    assert refused, "a burst 5x the batch size beyond max_queue_size was never refused"
    assert served, "nothing was served"
    slowest_served = max(s for _, s in served)  # measured in the same burst, on the same busy cores
    for error, seconds in refused:
        assert any(word in error.lower() for word in ("queue", "exceeds", "timeout", "timed out", "full")), error
        assert seconds < slowest_served, f"a refusal took {seconds:.1f} s, longer than serving ({slowest_served:.1f} s): {error}"
    after = generate(queue_server.grpc_url, "ensemble", "Hello", max_tokens=2, timeout_s=120)
    assert after.ok, after.error


def _cancelled_lines(server) -> int:
    """Requests the reference runtime cancelled in its batching manager (one log line each)."""
    return server.log_file.read_text(errors="replace").count("ended (cancelled)")


# README, "Cancellation": a cancelled stream's slot and KV-cache blocks are freed within this long.
CANCEL_FREES_SLOT_S = 1.0


def _freed_after(server, since: float, timeout_s: float) -> float:
    """Seconds from `since` (time.monotonic) until the runtime's metrics show no request active or waiting
    and no KV block used."""
    deadline = since + timeout_s
    while True:
        metrics = runtime_metrics(server)
        now = time.monotonic()
        if metrics["active"] == 0 and metrics["waiting"] == 0 and metrics["kv_used"] == 0:
            return now - since
        if now > deadline:
            raise AssertionError(f"slots or KV blocks still held {timeout_s:.0f} s after the cancel: {metrics}")
        time.sleep(0.02)


def _llm_inputs(tokenizer, prompt: str, max_tokens: int) -> list:
    """A direct tensorrt_llm request (token ids in, streamed, at least max_tokens tokens)."""
    import tritonclient.grpc as grpcclient

    ids = tokenizer.encode(prompt)
    values = (("input_ids", np.array([ids], dtype=np.int32), "INT32"),
              ("input_lengths", np.array([[len(ids)]], dtype=np.int32), "INT32"),
              ("request_output_len", np.array([[max_tokens]], dtype=np.int32), "INT32"),
              ("min_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
              ("streaming", np.array([[True]], dtype=bool), "BOOL"))
    inputs = []
    for name, array, dtype in values:
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("model", ["tensorrt_llm_bls", "tensorrt_llm"])
def test_cancelled_streams_free_their_slots(demo_server, demo_engine, model: str) -> None:
    """Fill every batch slot (8) with long streams, cancel them after their first tokens: the runtime's
    own metrics show every slot and every KV block free within CANCEL_FREES_SLOT_S of the cancel (timed on
    the metrics, refreshed every 100 ms, not on a log line written before the release), each is cancelled
    in its batching manager (a log line per request), and 8 fresh short requests finish long before the
    cancelled ones would have."""
    from transformers import AutoTokenizer

    from pipeline.clients.triton import generate

    slots, long_tokens = 8, 400
    tokenizer = AutoTokenizer.from_pretrained(demo_engine / "tokenizer", trust_remote_code=False)
    before = _cancelled_lines(demo_server)
    streams = []
    for i in range(slots):
        prompt = f"Write a very long essay number {i}."
        inputs = (_text_inputs(prompt, long_tokens, min_tokens=long_tokens) if model == "tensorrt_llm_bls"
                  else _llm_inputs(tokenizer, prompt, long_tokens))
        streams.append(_stream(demo_server.grpc_url, model, inputs))
    try:
        for client, events in streams:
            _, _, error = events.get(timeout=300)
            assert error is None, error
        # the decode rate with every slot busy: time for a few more responses on the first stream
        _, events0 = streams[0]
        t0 = time.monotonic()
        for _ in range(3):
            events0.get(timeout=120)
        per_token = (time.monotonic() - t0) / 3
        wait_busy(demo_server, active=slots, kv_used=slots)  # what the cancel has to give back
    finally:
        cancel_sent = time.monotonic()
        for client, _ in streams:
            client.stop_stream(cancel_requests=True)
            client.close()
    would_take = per_token * long_tokens  # the long streams would hold their slots this long
    freed_s = _freed_after(demo_server, cancel_sent, timeout_s=60)  # a hang guard; the claim is the bound below
    print(f"{model}: {slots} cancelled streams' slots and KV blocks free {freed_s:.3f} s after the first cancel "
          f"was sent, seen in the metrics ({per_token * 1000:.0f} ms per decode step with {slots} busy slots)")
    assert freed_s < CANCEL_FREES_SLOT_S, f"slots and KV blocks free {freed_s:.2f} s after the cancel (README: < 1 s)"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _cancelled_lines(demo_server) < before + slots:
        time.sleep(0.05)
    assert _cancelled_lines(demo_server) == before + slots, "not every cancelled stream was cancelled in the runtime"
    started = time.monotonic()
    answers = [None] * slots

    def fresh(i: int) -> None:
        answers[i] = generate(demo_server.grpc_url, "ensemble", f"Say hi {i}", max_tokens=4, timeout_s=would_take)

    threads = [threading.Thread(target=fresh, args=(i,)) for i in range(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    print(f"{model}: {per_token * 1000:.0f} ms per response with {slots} busy slots; the long streams would need "
          f"{would_take:.0f} s; {slots} fresh requests after cancelling took {elapsed:.1f} s")
    assert all(a is not None and a.ok for a in answers), [a.error for a in answers if a is not None]
    assert elapsed < would_take / 3, f"fresh requests took {elapsed:.1f} s, the cancelled streams needed {would_take:.1f} s"


def _tensorrt_llm_successes(metrics_url: str) -> int:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    match = re.search(r'^nv_inference_request_success\{model="tensorrt_llm",version="1"\} (\d+)', text, re.M)
    return int(match.group(1)) if match else 0


def test_ensemble_cancellation_does_not_reach_tensorrt_llm(demo_server) -> None:
    """The documented limitation (README, "Cancellation"): Triton 2.51 stops scheduling further
    ensemble steps for a cancelled request but does not cancel the step already running, so the
    tensorrt_llm request of a cancelled ensemble stream runs to its max_tokens and holds its slot until
    then. Short here (24 tokens) so the shared server is free again in seconds. Should a Triton
    release propagate the cancellation, this test fails: then drop the limitation from the README."""
    tokens = 24
    before_cancelled = _cancelled_lines(demo_server)
    before_ok = _tensorrt_llm_successes(demo_server.metrics_url)
    client, events = _stream(demo_server.grpc_url, "ensemble", _text_inputs("Tell a story.", tokens, min_tokens=tokens))
    try:
        _, _, error = events.get(timeout=120)
        assert error is None, error
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _tensorrt_llm_successes(demo_server.metrics_url) == before_ok:
        time.sleep(0.2)
    assert _tensorrt_llm_successes(demo_server.metrics_url) == before_ok + 1, "tensorrt_llm never finished the request"
    assert _cancelled_lines(demo_server) == before_cancelled, "the ensemble's cancellation reached the runtime now"

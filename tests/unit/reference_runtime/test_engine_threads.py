"""The reference runtime never keeps its process alive: every thread it starts is a daemon (the
interpreter of a finalized Python-backend stub waits at exit for the others), and close() ends what runs.

A real ReferenceEngine on the tiny Llama checkpoint (transformers' continuous batching, a few MB)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pipeline.reference_runtime.engine import ReferenceEngine
from pipeline.reference_runtime.requests import EngineLimits, GenerationRequest

LIMITS = EngineLimits(max_batch_size=2, max_input_len=8, max_seq_len=64, max_num_tokens=64, tokens_per_block=16,
                      max_tokens_in_paged_kv_cache=256, cancellation_check_period_ms=10)


def test_engine_threads_are_daemons_and_close_cancels_running_requests(tiny_ckpt: Path) -> None:
    before = set(threading.enumerate())
    engine = ReferenceEngine(tiny_ckpt, LIMITS)
    events = []
    first = threading.Event()

    def on_event(event) -> None:
        events.append(event)
        first.set()

    try:
        started = [t for t in threading.enumerate() if t not in before]
        assert started, "the engine started no thread"
        assert [t.name for t in started if not t.daemon] == [], "threads that would keep a stub's interpreter alive"
        # end_id -1: no end token, so the request runs for its 56 tokens unless close() comes first
        engine.submit(GenerationRequest(input_ids=[1, 2, 3], max_new_tokens=56, end_id=-1, streaming=True), on_event)
        assert first.wait(60), "no token came"
    finally:
        closing = time.monotonic()
        engine.close()
        took = time.monotonic() - closing
    assert events[-1].finished and events[-1].finish_reason in ("cancelled", "length")
    assert took < 10, f"close() took {took:.1f} s"
    deadline = time.monotonic() + 5
    while (left := [t.name for t in threading.enumerate() if t not in before and t.is_alive()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], "threads outlive close()"

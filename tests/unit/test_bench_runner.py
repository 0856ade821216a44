"""Timing logic of the bench runner against a fake transport on a scripted (virtual) clock."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.bench.metrics import level_summary, request_metrics
from pipeline.bench.runner import Load, Runner
from pipeline.bench.session import finish_level

from pipeline.bench.fakes import FakeTransport, Script, VirtualTime, WhitespaceTokenizer, requests


def _runner(vt: VirtualTime, transport: FakeTransport, **kw) -> Runner:
    return Runner(transport, clock=vt.clock, sleep=vt.sleep, wall_ns=lambda: int(vt.now * 1e9), **kw)


def test_ttft_tpot_latency_follow_genai_perf_definitions() -> None:
    vt = VirtualTime()
    runner = _runner(vt, FakeTransport(vt, lambda r: Script(ttft=0.1, gap=0.02, tokens=5)))
    run = vt.run(runner.run(Load(concurrency=1, requests=1), iter(requests(1))))
    summary, (m,) = finish_level(run, WhitespaceTokenizer())
    assert m.ttft_ms == pytest.approx(100.0)
    assert m.latency_ms == pytest.approx(180.0)
    assert m.osl == 5 and m.responses == 5
    assert m.tpot_ms == pytest.approx((180.0 - 100.0) / 4)
    assert m.output_tok_s == pytest.approx(5 / 0.18)
    assert summary["output_tok_s"] == pytest.approx(5 / 0.18)


def test_concurrency_keeps_n_requests_in_flight() -> None:
    vt = VirtualTime()
    transport = FakeTransport(vt)
    run = vt.run(_runner(vt, transport).run(Load(concurrency=2, requests=4), iter(requests(4))))
    sends = sorted(t for _, t in transport.sent)
    assert sends == pytest.approx([0.0, 0.0, 0.18, 0.18])
    summary, _ = finish_level(run, WhitespaceTokenizer())
    assert summary["duration_s"] == pytest.approx(0.36)
    assert summary["requests_s"] == pytest.approx(4 / 0.36)
    assert summary["output_tok_s"] == pytest.approx(20 / 0.36)
    assert summary["ttft_ms"]["p50"] == pytest.approx(100.0)


def test_duration_bounds_the_level_and_started_requests_finish() -> None:
    vt = VirtualTime()
    transport = FakeTransport(vt)
    run = vt.run(_runner(vt, transport).run(Load(concurrency=1, duration_s=0.5), iter(requests(100))))
    assert [r.index for r in run.records] == [0, 1, 2]  # started at 0, .18, .36; none at .54
    assert run.end_t == pytest.approx(0.54)


def test_constant_rate_sends_on_schedule_whatever_the_server_does() -> None:
    vt = VirtualTime()
    transport = FakeTransport(vt, lambda r: Script(ttft=1.0, tokens=2))  # slower than the arrivals
    vt.run(_runner(vt, transport).run(Load(rate=10, arrival="constant", requests=5), iter(requests(5))))
    assert [t for _, t in transport.sent] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_poisson_arrivals_are_seeded_and_bounded_by_duration() -> None:
    def sends():
        vt = VirtualTime()
        transport = FakeTransport(vt)
        vt.run(_runner(vt, transport).run(Load(rate=20, arrival="poisson", duration_s=2.0), iter(requests(1000))))
        return [t for _, t in transport.sent]

    first, second = sends(), sends()
    assert first == second
    assert all(b > a for a, b in zip(first, first[1:]))
    assert first[-1] < 2.0
    assert 20 <= len(first) <= 60  # ~40 expected at 20/s for 2 s


def test_errors_are_records_not_drops() -> None:
    vt = VirtualTime()
    script = lambda r: Script(error="model exploded") if r.index == 1 else Script()  # noqa: E731
    run = vt.run(_runner(vt, FakeTransport(vt, script)).run(Load(concurrency=1, requests=4), iter(requests(4))))
    summary, metrics = finish_level(run, WhitespaceTokenizer())
    assert summary["requests"] == 4 and summary["completed"] == 3 and summary["errors"] == 1
    assert summary["error_rate"] == pytest.approx(0.25)
    assert summary["error_messages"] == {"model exploded": 1}
    assert metrics[1].ok is False and metrics[1].ttft_ms is None


def test_timeout_is_counted_as_an_error() -> None:
    class Stuck:
        async def stream(self, request):
            await asyncio.sleep(30)
            yield None

    runner = Runner(Stuck(), request_timeout_s=0.05)
    record = asyncio.run(runner.one(requests(1)[0]))
    assert record.error == "timeout after 0.05 s"
    assert request_metrics(record, None).ok is False


def test_warmup_requests_are_sent_but_not_measured() -> None:
    vt = VirtualTime()
    transport = FakeTransport(vt)
    runner = _runner(vt, transport)

    async def both():
        await runner.warmup(requests(2), concurrency=2)
        return await runner.run(Load(concurrency=1, requests=3), iter(requests(3)))

    run = vt.run(both())
    assert len(transport.sent) == 5
    assert len(run.records) == 3
    summary = level_summary(run, [request_metrics(r, 5) for r in run.records])
    assert summary["requests"] == 3 and summary["ttft_ms"]["p50"] == pytest.approx(100.0)

"""Timing logic of the bench runner against a fake transport on a scripted (virtual) clock."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.bench.metrics import level_summary, request_metrics
from pipeline.bench.runner import Load, Runner
from pipeline.bench.session import finish_level

from bench_fakes import FakeTransport, Script, VirtualTime, WhitespaceTokenizer, requests


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


def test_prefill_decode_sweep_reports_growth_and_the_chunked_context_hint() -> None:
    """TTFT quadratic in ISL, TPOT linear in context: the sweep's fits and the hint must say so."""
    from pipeline.bench.diagnosis import diagnose
    from bench_fakes import word_tokenizer
    from pipeline.bench.session import BenchResult, LevelDriver, measure
    from pipeline.bench.spec import BenchSpec, Dist

    def script(request):
        return Script(ttft=1e-5 * request.isl ** 2, gap=0.01 + 1e-5 * (request.isl + request.max_tokens), tokens=request.max_tokens)

    vt = VirtualTime()
    spec = BenchSpec(url="fake:1", prefill_decode=True, pd_isl=(50, 100, 200), pd_osl=(10, 20, 40), requests=2,
                     isl=Dist(mean=100), osl=Dist(mean=10), warmup=0)
    result = BenchResult(spec=spec, served_model="fake", tokenizer_dir=None)
    tokenizer = word_tokenizer()  # the fake streams " w" per token: one [UNK] token each

    vt.run(measure(spec, LevelDriver(_runner(vt, FakeTransport(vt, script)), None), tokenizer, [], result))
    pd = result.prefill_decode
    assert [p["isl"] for p in pd["isl_sweep"]] == [50, 100, 200]
    assert [round(p["ttft_ms_p50"], 3) for p in pd["isl_sweep"]] == [25.0, 100.0, 400.0]
    assert [lv["load"] for lv in result.levels] == ["isl=50", "isl=100", "isl=200", "osl=10", "osl=20", "osl=40"]
    # TPOT = 10 ms + 0.01 ms per token of (ISL + OSL): per 1k tokens of mean context (ISL + OSL/2) that is 20 ms
    assert pd["tpot_ms_per_1k_context"] == pytest.approx(20.0, rel=1e-6)
    assert pd["ttft_ms_per_1k_isl"] > 0
    hints = diagnose(result.levels, result.servers, pd)
    assert any("TTFT p50 x16.0" in h.measurement and "ISL x4" in h.measurement for h in hints)

"""bench --speculative: the same workload with and without speculation on virtual time (tests/bench_fakes.py), the
acceptance counts through the transport's perf outputs, the speedup per concurrency, the break-even, the reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_fakes import FakeTransport, Script, VirtualTime, WhitespaceTokenizer, requests
from pipeline.bench.runner import Runner
from pipeline.bench.session import BenchResult, LevelDriver, measure
from pipeline.bench.spec import BenchSpec
from pipeline.bench.speculative import (ServedSpeculation, SpeculativeResult, break_even, compare,
                                        require_speculation, run_speculative_bench, write_speculative)
from pipeline.build.speculative import recorded_speculation
from pipeline.core.errors import InvalidInputError

LEVELS = (1, 2, 4, 8)
OSL = 17  # the first token, then 16 decode tokens: 4 steps of 1 + 3 accepted drafts with speculation


def _step_s(concurrency: int, speculative: bool) -> float:
    """Baseline: one token per step, 10 ms growing slowly with the batch; speculation: 4 tokens per step, whose
    verification of K=4 drafts grows fast with the batch (its extra tokens cost compute), so it stops paying."""
    return 0.01 * (1 + 2 * concurrency) if speculative else 0.01 * (1 + concurrency / 4)


def _measure(speculative: bool, spec: BenchSpec) -> BenchResult:
    vt = VirtualTime()
    level = {"c": 1}

    def script(_request) -> Script:
        gap = _step_s(level["c"], speculative)
        if speculative:  # 4 steps: 12 of 16 drafts accepted
            return Script(ttft=0.05, gap=gap, tokens=OSL, per_chunk=4, accepted=12, drafted=16)
        return Script(ttft=0.05, gap=gap, tokens=OSL)

    result = BenchResult(spec=spec, served_model="fake", tokenizer_dir=None)
    runner = Runner(FakeTransport(vt, script), clock=vt.clock, sleep=vt.sleep)
    on_level = lambda load: level.update(c=load.concurrency)  # noqa: E731
    vt.run(measure(spec, LevelDriver(runner, None), WhitespaceTokenizer(), requests(4, osl=OSL), result, on_level))
    return result


@pytest.fixture(scope="module")
def runs() -> tuple[BenchResult, BenchResult]:
    spec = BenchSpec(url="fake:1", concurrency=LEVELS, warmup=0, speculative=True, baseline="fake:2")
    return _measure(True, spec), _measure(False, spec)


def test_acceptance_speedup_and_break_even(runs):
    with_spec, baseline = runs
    rows = compare(with_spec, baseline)
    assert [r["concurrency"] for r in rows] == list(LEVELS)
    for row in rows:
        assert row["acceptance_rate"] == pytest.approx(0.75)
        assert row["accepted_per_step"] == pytest.approx(3.0)  # (17 - 1 - 12) = 4 steps for 12 accepted
        assert row["tokens_per_step"] == pytest.approx(4.0)
        c = row["concurrency"]
        # per-request latency 50 ms + steps x step time; concurrency workers back to back: the tok/s ratio is theirs
        expected = (0.05 + 16 * _step_s(c, False)) / (0.05 + 4 * _step_s(c, True))
        assert row["speedup"] == pytest.approx(expected, rel=1e-6)
        assert row["tpot_ms_spec"] == pytest.approx(4 * _step_s(c, True) / 16 * 1000, rel=1e-6)
        assert row["tpot_ms_base"] == pytest.approx(_step_s(c, False) * 1000, rel=1e-6)
    assert rows[0]["speedup"] > 1 > rows[2]["speedup"]
    assert break_even(rows) == 4


def test_no_counts_means_no_acceptance_and_pays_everywhere_means_no_break_even(runs):
    _, baseline = runs
    rows = compare(baseline, baseline)  # a "speculative" run whose server sent no counts
    assert all(r["acceptance_rate"] is None and r["tokens_per_step"] is None for r in rows)
    assert all(r["speedup"] == pytest.approx(1.0) for r in rows)
    assert break_even([{**r, "speedup": 1.5} for r in rows]) is None


def test_reports_json_csv_png_and_both_runs(runs, tmp_path):
    with_spec, baseline = runs
    spec = with_spec.spec
    result = SpeculativeResult(spec=spec, speculation=ServedSpeculation({"method": "ngram", "max_draft_len": 4}, True, "test"),
                               with_spec=with_spec, baseline=baseline, levels=compare(with_spec, baseline))
    result.break_even = break_even(result.levels)
    out = write_speculative(result, tmp_path)
    data = json.loads((out / "speculative.json").read_text())
    assert data["break_even_concurrency"] == 4 and data["speculation"]["method"] == "ngram"
    assert [lv["concurrency"] for lv in data["levels"]] == list(LEVELS)
    csv_lines = (out / "speculative.csv").read_text().splitlines()
    assert csv_lines[0].startswith("concurrency,acceptance_rate,accepted_per_step") and len(csv_lines) == 1 + len(LEVELS)
    assert (out / "speedup_vs_concurrency.png").read_bytes()[:4] == b"\x89PNG"
    for side in ("speculative", "baseline"):
        assert (out / side / "bench.json").is_file() and (out / side / "requests.csv").is_file()
    per_request = (out / "speculative" / "requests.csv").read_text().splitlines()
    assert per_request[0].endswith("accepted_draft_tokens,draft_tokens") and per_request[1].endswith(",12,16")


def test_speculative_needs_a_baseline_and_a_sweep():
    with pytest.raises(InvalidInputError, match="--baseline"):
        run_speculative_bench(BenchSpec(url="fake:1", speculative=True))
    with pytest.raises(InvalidInputError, match="--rate"):
        run_speculative_bench(BenchSpec(url="fake:1", speculative=True, baseline="fake:2", rate=(1.0,)))


def _build_folder(folder: Path, manifest: dict, build_config: dict | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"stage": "build", **manifest}))
    if build_config is not None:
        (folder / "config.json").write_text(json.dumps({"build_config": build_config}))
    return folder


def test_a_deployment_built_without_speculation_is_refused_with_what_works(tmp_path):
    plain = _build_folder(tmp_path / "plain", {}, {"max_batch_size": 8})
    assert recorded_speculation(plain) is None
    with pytest.raises(InvalidInputError, match="built without speculation") as caught:
        require_speculation(ServedSpeculation(recorded_speculation(plain), True, f"{plain}/manifest.json"), "h:8001")
    assert "pipeline build --speculative" in caught.value.hint
    record = {"method": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 2}
    assert recorded_speculation(_build_folder(tmp_path / "spec", {"speculative": record})) == record
    reference = _build_folder(tmp_path / "ref", {}, {"speculative": record})
    assert recorded_speculation(reference) == record
    engine = _build_folder(tmp_path / "engine", {}, {"speculative_decoding_mode": "draft_tokens_external", "max_draft_len": 4})
    assert recorded_speculation(engine) == {"method": "draft_tokens_external", "max_draft_len": 4}
    assert recorded_speculation(tmp_path) is False  # no build folder: unknown, not refused
    require_speculation(ServedSpeculation(None, False, "remote"), "h:8001")  # unknown: not refused


def test_cli_speculative_without_baseline_exits_2(capsys):
    from pipeline.cli import run

    code = run(["bench", "--url", "127.0.0.1:1", "--speculative"])
    assert code == 2
    assert "--baseline" in capsys.readouterr().err


def test_the_baseline_is_not_scraped_at_the_speculative_servers_metrics_url(monkeypatch):
    import pipeline.bench.speculative as S

    seen = []
    monkeypatch.setattr(S, "run_bench", lambda spec, **kw: seen.append(spec) or BenchResult(spec, "m", None))
    fake = S.Side(transport=object(), info=S.ModelInfo(name="m", inputs=frozenset(), batched=True))
    S.run_speculative_bench(BenchSpec(url="h:8201", baseline="h:8101", speculative=True, metrics_url="http://h:8202/metrics"),
                            speculative=fake, baseline=fake, tokenizer=WhitespaceTokenizer(), write=False)
    baseline, speculative = seen
    assert (baseline.url, baseline.metrics_url) == ("h:8101", None)
    assert (speculative.url, speculative.metrics_url, speculative.perf_metrics) == ("h:8201", "http://h:8202/metrics", True)

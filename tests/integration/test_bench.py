"""`pipeline bench` through a real tritonserver against the zero-work echo model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench_fakes import word_tokenizer
from pipeline.cli import run
from pipeline.serve import ServerSpec, start_server

pytestmark = [pytest.mark.triton, pytest.mark.slow]

ECHO_REPO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_repo"


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("echo") / "server.log"
    with start_server(ServerSpec(repo=ECHO_REPO, log_file=log, ready_timeout_s=120)) as server:
        yield server


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    word_tokenizer().save_pretrained(folder)
    return folder


def _bench(server, tokenizer_dir: Path, out: Path, *extra: str) -> int:
    return run(["bench", "--url", server.grpc_url, "--model", "echo", "--tokenizer", str(tokenizer_dir),
                "--metrics-url", server.metrics_url, "--out", str(out), "--isl", "32", "--osl", "16", *extra])


def _report(out: Path) -> dict:
    (folder,) = [p for p in out.iterdir() if p.name.startswith("bench-")]
    return json.loads((folder / "bench.json").read_text())


def test_sweep_measures_every_request_and_scrapes_the_server(echo_server, tokenizer_dir, tmp_path) -> None:
    code = _bench(echo_server, tokenizer_dir, tmp_path, "--concurrency", "1,4", "--requests", "12",
                  "--slo", "error_rate=0", "--slo", "ttft_p99_ms=5000", "--perf-metrics")
    assert code == 0
    data = _report(tmp_path)
    levels = data["levels"]
    assert [lv["load"] for lv in levels] == ["c=1", "c=4"]
    for lv in levels:
        assert lv["completed"] == 12 and lv["errors"] == 0
        assert {r["osl"] for r in lv["per_request"]} == {16}  # forced OSL, counted with the tokenizer
        assert {r["isl"] for r in lv["per_request"]} == {32}
        assert all(r["responses"] == 16 for r in lv["per_request"])
        assert 0 < lv["ttft_ms"]["p50"] <= lv["latency_ms"]["p50"]
        assert lv["server_ttft_ms"]["count"] == 12  # return_perf_metrics answered
    server = data["server"][1]["models"]["echo"]
    assert server["requests"] == 12 and server["compute_ms_per_request"] > 0
    folder = next(tmp_path.iterdir())
    assert (folder / "ttft_tpot_vs_concurrency.png").stat().st_size > 1000


def test_slo_failure_exits_4_with_reports_written(echo_server, tokenizer_dir, tmp_path) -> None:
    code = _bench(echo_server, tokenizer_dir, tmp_path, "--concurrency", "2", "--requests", "4",
                  "--slo", "ttft_p99_ms=0.0001")
    assert code == 4
    assert [g["passed"] for g in _report(tmp_path)["slo"]] == [False]


def test_server_errors_are_counted_not_dropped(echo_server, tokenizer_dir, tmp_path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"text_input": "aaaa aaab", "max_tokens": 4}\n{"text_input": "aaac", "max_tokens": 0}\n')
    code = _bench(echo_server, tokenizer_dir, tmp_path / "out", "--dataset", str(data), "--concurrency", "1",
                  "--requests", "6", "--slo", "error_rate=0")
    assert code == 4
    (level,) = _report(tmp_path / "out")["levels"]
    assert level["requests"] == 6 and level["errors"] == 3
    assert any("max_tokens must be > 0" in message for message in level["error_messages"])


def test_constant_rate_bounded_by_duration(echo_server, tokenizer_dir, tmp_path) -> None:
    code = _bench(echo_server, tokenizer_dir, tmp_path, "--rate", "20", "--arrival", "constant", "--duration", "1")
    assert code == 0
    (level,) = _report(tmp_path)["levels"]
    assert level["load"] == "rate=20/s" and level["requests"] == 20 and level["errors"] == 0
    assert {r["osl"] for r in level["per_request"]} == {16}  # text kept as raw tensor bytes, decoded after


def test_unreachable_server_is_a_clear_error(tokenizer_dir, tmp_path) -> None:
    from pipeline.serve import free_port

    assert run(["bench", "--url", f"127.0.0.1:{free_port()}", "--model", "echo", "--tokenizer", str(tokenizer_dir),
                "--out", str(tmp_path)]) == 1

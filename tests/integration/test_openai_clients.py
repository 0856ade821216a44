"""`pipeline smoke` and `pipeline bench` against a real OpenAI-compatible server: `transformers serve
--continuous-batching` (transformers[serving]: fastapi, uvicorn, openai) on the demo model's HF folder, started
once for this module (~20-40 s on 2 cores). Prompts and outputs are short to keep CI time small.

What transformers serve 5.24 does not do, so these checks are skipped here and the server's gap is stated:
  - stop_word: with --continuous-batching the generation config of the FIRST request is used for every
    later one (ContinuousBatchingManager.init_cb, "TODO: remove when CB supports per-request generation
    config"), so a request's `stop` is ignored;
  - too_long_prompt: it checks no prompt length; a 20000-token prompt was accepted (HTTP 200) and held the
    server for minutes (measured while writing this test). test_too_long_prompt_accepted_is_a_failed_check
    shows smoke says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.cli import run

pytestmark = [pytest.mark.server, pytest.mark.slow]

TRANSFORMERS_GAPS = ("stop_word", "too_long_prompt")


@pytest.fixture(scope="module")
def openai_url(demo_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving] (fastapi, uvicorn, openai)")
    pytest.importorskip("uvicorn", reason="transformers serve needs transformers[serving]")
    from pipeline.core.processes import spawn
    from pipeline.serve import free_port

    port = free_port()
    log = tmp_path_factory.mktemp("openai") / "transformers-serve.log"
    # --cb-num-blocks 32: 32 pages of 256 tokens (~0.4 GB of fp32 KV for the demo); left to itself the CPU
    # server sized its cache to ~13.7 GB RSS and was OOM-killed on a 24 GB machine.
    argv = [str(Path(sys.executable).with_name("transformers")), "serve", str(demo_hf_dir), "--continuous-batching",
            "--cb-num-blocks", "32", "--device", "cpu", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as handle:
        process = spawn(argv, stdout=handle, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                pytest.fail(f"transformers serve exited {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve not healthy within 300 s: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield base + "/v1"
    finally:
        # A server still busy with test_too_long_prompt's 8256 words (run last) does not stop on SIGTERM: in CI it
        # sat out the whole 20 s this used to wait and was killed. 5 s is plenty for one that does stop.
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_smoke_over_openai_chat(openai_url, tmp_path) -> None:
    from pipeline.smoke import SmokeSpec, run_smoke

    report = run_smoke(SmokeSpec(url=openai_url, max_tokens=8, concurrency=4, skip=TRANSFORMERS_GAPS,
                                 report=tmp_path / "smoke.json"))
    data = report.model_dump(mode="json")
    assert report.passed, [c for c in data["checks"] if not c["passed"] and not c["skipped"]]
    assert data["contract"] == "openai"
    names = [c["name"] for c in data["checks"]]
    assert names == ["live_ready", "metadata", "greedy", "streaming", "max_tokens", "stop_word", "concurrent_4",
                     "too_long_prompt"]
    checks = {c["name"]: c for c in data["checks"]}
    assert "usage.completion_tokens" in checks["max_tokens"]["detail"]
    assert {name for name, c in checks.items() if c["skipped"]} == set(TRANSFORMERS_GAPS)
    assert data["answer"] and json.loads((tmp_path / "smoke.json").read_text())["passed"] is True


def test_smoke_cli_reports_skipped_checks(openai_url, capsys) -> None:
    """The CLI's --skip and --model (the served id): a failing run would exit 4; skipped checks show as SKIP."""
    from pipeline.clients.contract import detect

    model = detect(openai_url).model
    code = run(["smoke", "--url", openai_url, "--model", model, "--skip", "greedy", "--skip", "streaming",
                "--skip", "max_tokens", "--skip", "stop_word", "--skip", "concurrent_8", "--skip", "too_long_prompt"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("SKIP") == 6 and "PASS" in out
    assert run(["smoke", "--url", openai_url, "--model", "no-such-model"]) == 2


def test_bench_over_openai_chat_gates_and_reports(openai_url, tmp_path) -> None:
    code = run(["bench", "--url", openai_url, "--concurrency", "1,2", "--requests", "2", "--isl", "16", "--osl", "4",
                "--warmup", "1", "--slo", "error_rate=0", "--slo", "ttft_p99_ms=600000", "--out", str(tmp_path)])
    assert code == 0
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("bench-")]
    data = json.loads((folder / "bench.json").read_text())
    assert [lv["load"] for lv in data["levels"]] == ["c=1", "c=2"]
    for level in data["levels"]:
        assert level["completed"] == 2 and level["errors"] == 0
        for request in level["per_request"]:
            assert 1 <= request["osl"] <= 4  # usage.completion_tokens, within max_tokens
            assert request["isl"] > 16  # usage.prompt_tokens: the 16-token prompt inside the chat template
            assert 0 < request["ttft_ms"] <= request["latency_ms"]
    assert any("usage.completion_tokens" in note for note in data["notes"])
    assert any("min_tokens" in note for note in data["notes"])  # transformers serve refuses it (HTTP 422)
    assert (folder / "ttft_tpot_vs_concurrency.png").stat().st_size > 1000
    assert run(["bench", "--url", openai_url, "--concurrency", "1", "--requests", "1", "--isl", "8", "--osl", "2",
                "--warmup", "0", "--endpoint", "completions", "--slo", "ttft_p99_ms=0.001", "--out", str(tmp_path / "gate")]) == 4


def test_too_long_prompt_accepted_is_a_failed_check(openai_url) -> None:
    """transformers serve accepts a prompt over the model's context (max_position_embeddings 8192 + 64 words):
    the check fails and says so. Runs last: whether the server answers again after smoke's disconnect varies
    (it did on a fresh server, 17 s in all; after this module's other requests it did not within 180 s)."""
    from pipeline.smoke import SmokeSpec, run_smoke

    skip = ("metadata", "greedy", "streaming", "max_tokens", "stop_word", "concurrent_8")
    report = run_smoke(SmokeSpec(url=openai_url, skip=skip, max_tokens=4, timeout_s=30))
    check = report.checks[-1]
    assert check.name == "too_long_prompt" and not check.passed and not report.passed
    assert "HTTP 200, a 8256-word prompt was accepted" in check.detail, check.detail

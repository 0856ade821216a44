"""The smoke suite against the demo deployment, through the library and the CLI."""

from __future__ import annotations

import json

import pytest

from pipeline import cli
from pipeline.smoke import SmokeSpec, run_smoke

pytestmark = pytest.mark.server


def test_smoke_ensemble_passes(demo_server, tmp_path) -> None:
    report = run_smoke(SmokeSpec(url=demo_server.grpc_url, model="ensemble", report=tmp_path / "smoke.json"))
    failed = {c.name: c.detail for c in report.checks if not c.passed}
    assert report.passed, failed
    assert [c.name for c in report.checks] == [
        "live_ready", "metadata", "greedy", "streaming", "max_tokens", "stop_word",
        "tensorrt_llm_bls_equals_ensemble", "concurrent_8", "too_long_prompt"]
    assert report.decoupled is True and report.answer
    assert json.loads((tmp_path / "smoke.json").read_text())["passed"] is True


def test_no_decoupled_repository_serves_warms_up_and_passes_smoke(demo_engine, session_build_root, tmp_path) -> None:
    """`pipeline render --no-decoupled` (the mode NVIDIA's end-to-end test uses) gives a repository that
    serve starts (warm-up in whole responses) and smoke passes, with stream=true refused by name."""
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    repo = render(RenderSpec(engine=demo_engine, runtime="reference", decoupled=False,
                             out=session_build_root / "smoke" / "repo-no-decoupled")).repo
    assert "decoupled: false" in (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    spec = ServerSpec(repo=repo, log_file=tmp_path / "server.log", ready_timeout_s=600, warmup=True, exit_timeout_s=5)
    with start_server(spec) as server:
        reports = [run_smoke(SmokeSpec(url=server.grpc_url, model=model)) for model in ("ensemble", "tensorrt_llm_bls")]
    for report in reports:
        failed = {c.name: c.detail for c in report.checks if not c.passed}
        assert report.passed, (report.model, failed)
        assert report.decoupled is False
        assert [c.name for c in report.checks][3] == "streaming_refused"
        assert report.answer


def test_smoke_cli_on_bls(demo_server, capsys) -> None:
    code = cli.run(["smoke", "--url", demo_server.grpc_url, "--model", "tensorrt_llm_bls", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in data["checks"] if not c["passed"]]
    assert data["model"] == "tensorrt_llm_bls" and data["passed"] is True


def test_smoke_fails_with_exit_4_when_no_server(capsys) -> None:
    from pipeline.serve import free_port

    code = cli.run(["smoke", "--url", f"127.0.0.1:{free_port()}", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 4
    assert data["passed"] is False and data["checks"][0]["name"] == "live_ready"


@pytest.mark.parametrize("skip, named", [
    (["greedy"], "'streaming'"),  # streaming, stop_word and the BLS check compare with the greedy answer
    (["live_ready"], "decoupled"),  # the served mode, which max_tokens, streaming and concurrent need
    (["live_ready", "metadata", "greedy", "streaming", "streaming_refused", "max_tokens", "stop_word",
      "tensorrt_llm_bls_equals_ensemble", "concurrent_8", "too_long_prompt"], "no smoke check"),
])
def test_a_skip_that_starves_a_check_or_leaves_none_is_refused_with_exit_2(demo_server, capsys, skip, named) -> None:
    args = ["smoke", "--url", demo_server.grpc_url, "--model", "ensemble"]
    for name in skip:
        args += ["--skip", name]
    code = cli.run(args)
    captured = capsys.readouterr()
    assert code == 2, captured.out[-2000:]
    assert named in captured.err + captured.out


def test_a_skip_of_greedy_with_the_checks_that_need_it_passes(demo_server) -> None:
    skip = ("greedy", "streaming", "stop_word", "tensorrt_llm_bls_equals_ensemble", "too_long_prompt")
    report = run_smoke(SmokeSpec(url=demo_server.grpc_url, model="ensemble", skip=skip))
    assert report.passed, {c.name: c.detail for c in report.checks if not c.passed}
    assert [c.name for c in report.checks if c.skipped] == list(skip)

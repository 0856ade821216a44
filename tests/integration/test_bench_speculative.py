"""bench --speculative for real: the demo served twice on the CPU, built with n-gram speculation and without (the
session's demo server, same limits), the built-in summarization set (answers that copy from the prompt) through both. The server's acceptance counts arrive,
the comparison and the break-even are computed from them, the reports are written; --speculative against the
deployment built without it exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.server, pytest.mark.slow]

DEMO_BUILD_CONFIG = {"max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512, "max_num_tokens": 2048}  # the session demo's
NGRAM = {"method": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 2}


@pytest.fixture(scope="module")
def servers(demo_hf_dir: Path, demo_server, tmp_path_factory: pytest.TempPathFactory):
    from pipeline.build.reference_folder import write_reference_engine_dir
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    root = tmp_path_factory.mktemp("spec-bench")
    engine = write_reference_engine_dir(demo_hf_dir, root / "ngram" / "engine", {**DEMO_BUILD_CONFIG, "speculative": NGRAM})
    repo = render(RenderSpec(engine=engine, out=root / "ngram" / "repo")).repo
    with start_server(ServerSpec(repo=repo, log_file=root / "ngram.log", ready_timeout_s=600, exit_timeout_s=5)) as ngram:
        yield {"plain": demo_server, "ngram": ngram}, root


def test_ngram_on_summarization_reports_acceptance_speedup_and_files(servers) -> None:
    from pipeline.bench.datasets import resolve_dataset
    from pipeline.bench.spec import BenchSpec
    from pipeline.bench.speculative import run_speculative_bench

    served, root = servers
    spec = BenchSpec(url=served["ngram"].grpc_url, baseline=served["plain"].grpc_url, speculative=True,
                     concurrency=(1, 4), requests=4, warmup=1, dataset=resolve_dataset("summarization"),
                     out=root / "reports")
    result = run_speculative_bench(spec)
    assert result.speculation.record == NGRAM
    assert [r["concurrency"] for r in result.levels] == [1, 4]
    for row in result.levels:
        assert row["errors"] == 0
        assert row["acceptance_rate"] is not None and 0 < row["acceptance_rate"] <= 1
        assert row["tokens_per_step"] > 1 and row["speedup"] is not None
    data = json.loads((result.out_dir / "speculative.json").read_text())
    assert data["speculation"] == NGRAM and len(data["levels"]) == 2
    assert (result.out_dir / "speedup_vs_concurrency.png").is_file()


def test_speculative_against_a_plain_deployment_exits_2(servers, capsys) -> None:
    from pipeline.cli import run

    served, _ = servers
    code = run(["bench", "--speculative", "--url", served["plain"].grpc_url, "--baseline", served["plain"].grpc_url,
                "--requests", "1", "--concurrency", "1"])
    assert code == 2
    assert "built without speculation" in capsys.readouterr().err

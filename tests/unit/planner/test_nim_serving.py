"""NVIDIA's published NIM serving runs (pipeline/data/nim_published_serving.tsv), which no fit sees, against the closed-loop
prediction `pipeline plan --slo` searches with (scripts/plan_vs_nim.py): the figures README quotes, and the caveat an SLO
search with a TTFT p50 bound prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipeline.planner.prices import load_prices
from pipeline.planner.caveats import slo_caveats
from pipeline.planner.search import SearchSpec, search
from pipeline.planner.slo import parse_slo

from planner_cases import LLAMA_8B, script_module

# Per build goal and group of rows: rows, then median / worst |error| % of TTFT, TPOT and tokens/s, and on how many rows the
# predicted p99 TTFT is at least the published mean
QUOTED = {
    ("throughput", "one_client"): (2, (10.6, 15.5), (6.1, 7.2), (6.5, 7.7), 0),
    ("throughput", "in_batch"): (3, (17.1, 22.1), (1.3, 3.2), (1.5, 4.3), 3),
    ("throughput", "queued"): (4, (13.2, 75.3), (11.8, 12.0), (0.9, 1.2), 4),
    ("latency", "one_client"): (2, (12.4, 15.5), (6.1, 7.2), (6.5, 7.7), 0),
    ("latency", "in_batch"): (3, (22.4, 25.4), (2.7, 3.1), (2.1, 3.9), 3),
    ("latency", "queued"): (4, (39.5, 174.3), (20.1, 20.3), (7.9, 8.0), 4),
}


@pytest.fixture(scope="module")
def nim():
    return script_module("plan_vs_nim")


@pytest.fixture(scope="module")
def report(nim) -> dict:
    return nim.nim_report()


def test_table_names_its_page_and_configuration(nim) -> None:
    rows = nim.nim_rows()
    assert len(rows) == 9
    assert {(r["model"], r["gpu"], r["tp"], r["precision"], r["nim_version"]) for r in rows} == {
        ("llama-3.3-70b", "h100-sxm", "2", "FP8", "1.8.0")}
    assert {r["url"] for r in rows} == {"https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance.md"}
    for r in rows:
        assert r["table"] == f"{r['isl']} Input Tokens / {r['osl']} Output Tokens"
    assert [int(r["concurrency"]) for r in rows if r["isl"] == "5000"] == [1, 5, 25, 50, 100, 150, 200, 250]


def test_figures_are_what_the_readme_quotes(report) -> None:
    for (goal, group), (rows, ttft, tpot, tokens, covered) in QUOTED.items():
        part = report[goal][group]
        assert part["rows"] == rows, (goal, group)
        for metric, (median, worst) in zip(("ttft", "tpot", "tokens_per_s"), (ttft, tpot, tokens)):
            assert (part[metric]["median_abs_pct_error"], part[metric]["max_abs_pct_error"]) == pytest.approx((median, worst), abs=0.05), (goal, group, metric)
        assert part["ttft_p99_covers_published_mean"] == covered, (goal, group)


def test_the_caveat_quotes_the_report(report) -> None:
    caveat, = slo_caveats({"ttft_p50_ms", "tpot_p99_ms"}, {"h100"})
    loaded = [r for r in report["throughput"]["rows"] if r["concurrency"] > 1 and not r["queued"]]
    ratios = [r["ttft"]["published"] / r["ttft"]["predicted"] for r in loaded]
    low, high = map(float, re.search(r"mean TTFTs of ([\d.]+)-([\d.]+)x", caveat).groups())
    assert (low, high) == (round(min(ratios), 1), round(max(ratios), 1))
    summary = report["throughput"]["in_batch"]
    assert f"within {summary['tpot']['max_abs_pct_error']}% and {summary['tokens_per_s']['max_abs_pct_error']}%" in caveat
    assert f"5000/500 at {min(r['concurrency'] for r in loaded)}-{max(r['concurrency'] for r in loaded)} clients" in caveat
    assert summary["ttft_p99_covers_published_mean"] == summary["rows"] and report["throughput"]["queued"]["ttft_p99_covers_published_mean"] == 4


def test_an_slo_search_bounding_ttft_p50_on_a_gpu_says_so() -> None:
    assert slo_caveats({"ttft_p99_ms", "tpot_p50_ms"}, {"h100"}) == []
    assert slo_caveats({"ttft_p50_ms"}, {"cpu"}) == []  # the CPU's rates are measured on this host
    def caveats(slo: str) -> list[str]:
        spec = SearchSpec(model=LLAMA_8B, slo=parse_slo(slo), isl=2048, osl=256, gpus=("h100",), quants=("fp8",), tps=(1,))
        return search(spec, load_prices(None, [])).caveats

    assert slo_caveats({"ttft_p50_ms"}, {"h100"})[0] in caveats("ttft_p50_ms=800,tpot_p99_ms=40")
    assert not any("ttft_p50_ms" in c for c in caveats("ttft_p99_ms=800,tpot_p99_ms=40"))


def test_script_writes_json_and_png(nim, tmp_path: Path) -> None:
    assert nim.main(["--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "plan_vs_nim.json").read_text())
    assert set(data) == {"table", "throughput", "latency"}
    assert (tmp_path / "plan_vs_nim.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""TensorRT-LLM 0.20's published PyTorch-backend runs (pipeline/data/trtllm_published_throughput_0_20.tsv), which no fit
sees, against the shipped constants (scripts/plan_vs_earlier_release.py): the figures README quotes, and the caveat
`pipeline plan` gives a prediction bound by TP's all-reduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.planner.published import bench_requests, published_rows

from planner_cases import assert_beside, script_module

# Per configuration (model, GPU, TP, precision), over the runs the page names a request count for: median and worst
# |error| %, mean signed error %, whether a later page the fit reads publishes that configuration, and AIConfigurator's
# recorded estimates of the same rows (median, worst |error| %).
GROUPS = {
    ("llama-3.1-405b", "b200", 4, "FP4"): (4.5, 13.9, +4.3, True, (6.8, 51.2)),
    ("llama-3.1-405b", "b200", 8, "FP4"): (5.0, 9.2, +4.0, False, (16.3, 62.1)),
    ("llama-3.1-405b", "h100-sxm", 8, "FP8"): (2.5, 7.8, -2.2, True, (3.7, 10.4)),
    ("llama-3.1-405b", "h200", 8, "FP8"): (2.6, 11.4, -1.0, True, (6.6, 17.9)),
    ("llama-3.1-8b", "h100-sxm", 1, "FP8"): (4.4, 9.1, -1.4, True, (3.0, 45.5)),
    ("llama-3.1-8b", "h200", 1, "FP8"): (2.7, 11.7, +3.1, True, (4.9, 40.1)),
    ("llama-3.3-70b", "b200", 1, "FP4"): (4.3, 17.1, +5.3, True, (5.7, 46.8)),
    ("llama-3.3-70b", "b200", 2, "FP4"): (10.9, 28.5, +12.0, False, (21.5, 56.9)),
    ("llama-3.3-70b", "b200", 4, "FP4"): (4.7, 7.7, +4.9, False, (23.4, 67.2)),
    ("llama-3.3-70b", "b200", 8, "FP4"): (9.0, 15.5, +8.9, False, (17.7, 71.6)),
    ("llama-3.3-70b", "h100-sxm", 1, "FP8"): (20.4, 22.6, +16.6, False, (38.1, 43.3)),
    ("llama-3.3-70b", "h100-sxm", 2, "FP8"): (4.6, 12.9, +6.4, True, (7.6, 33.1)),
    ("llama-3.3-70b", "h100-sxm", 4, "FP8"): (2.1, 4.4, +1.7, False, (7.2, 12.5)),
    ("llama-3.3-70b", "h100-sxm", 8, "FP8"): (10.9, 16.6, +11.3, False, (10.0, 23.5)),
    ("llama-3.3-70b", "h200", 1, "FP8"): (2.0, 5.1, -0.3, True, (4.6, 12.9)),
    ("llama-3.3-70b", "h200", 2, "FP8"): (2.6, 18.2, +1.6, True, (6.0, 29.1)),
    ("llama-3.3-70b", "h200", 4, "FP8"): (2.1, 9.6, -2.9, False, (9.0, 45.1)),
    ("llama-3.3-70b", "h200", 8, "FP8"): (5.3, 8.1, +3.9, False, (10.8, 59.8)),
}
# (rows, median, worst, mean signed): the pooled figures README quotes. Before the PyTorch backend's fit added the silicon
# serving rows' TPOT (rates.py): 4.6/22.2 over the 149 runs, 7.4/15.0 bound by the all-reduce, 5.7/22.2 at TP degrees the
# fit never saw.
POOLED = {
    "summary": (149, 4.4, 28.5, +4.1), "with_steady_state_rows": (167, 4.4, 28.5, +4.7),
    "configs_the_fit_saw": (75, 3.3, 18.2, +2.0), "tp_the_fit_never_saw": (74, 5.8, 28.5, +6.2),
    "all_reduce_bound": (19, 8.1, 16.6, +8.8),
}


@pytest.fixture(scope="module")
def report() -> dict:
    """scripts/plan_vs_earlier_release.py's report, computed once for the tests that read it."""
    return script_module("plan_vs_earlier_release").earlier_release_report()


def test_table_names_its_release_and_no_fit_sees_it() -> None:
    rows = P.earlier_release_rows()
    assert len(rows) == 167 and {r["trtllm_version"] for r in rows} == {"0.20"} and {r["backend"] for r in rows} == {"pytorch"}
    first_line = {("llama-3.3-70b", "FP4"): 37, ("llama-3.1-405b", "FP4"): 55, ("llama-3.1-8b", "FP8"): 81,
                  ("llama-3.3-70b", "FP8"): 99, ("llama-3.1-405b", "FP8"): 118}
    for r in rows:
        assert (r["repo"], r["commit"], r["file"]) == ("NVIDIA/TensorRT-LLM", "v0.20.0", "docs/source/performance/perf-overview.md")
        assert first_line[(r["model"], r["precision"])] <= int(r["line"]) < first_line[(r["model"], r["precision"])] + 11
        assert r["published_unit"] == "total" and r["tokens_per_s"] == r["published_value"] and r["pp"] == "1"
        P.published_model(r["model"])  # every model has its shapes
    fitted = {(r["trtllm_version"], r["model"], r["gpu"]) for r in published_rows()}
    assert not any(v == "0.20" for v, _, _ in fitted)  # no fit reads this release
    # the page's request counts: as 1.0's, and none for 1024/2048
    assert bench_requests("0.20", 128, 128) == bench_requests("1.0", 128, 128) == 30000
    assert bench_requests("0.20", 1024, 2048) is None and sum(1 for r in rows if r["isl"] == "1024") == 18


def test_earlier_release_is_what_the_readme_quotes(report: dict) -> None:
    groups = {(g["model"], g["gpu"], g["tp"], g["precision"]): g for g in report["groups"]}
    assert set(groups) == set(GROUPS)
    for key, (median, worst, signed, saw, aic) in GROUPS.items():
        g = groups[key]
        theirs = g["aiconfigurator"]
        assert (theirs["aiconfigurator_median_abs_pct_error"], theirs["aiconfigurator_max_abs_pct_error"]) == pytest.approx(aic, abs=0.1), key
        assert (g["summary"]["median_abs_pct_error"], g["summary"]["max_abs_pct_error"]) == pytest.approx((median, worst), abs=0.1), key
        assert g["mean_signed_pct_error"] == pytest.approx(signed, abs=0.1) and g["fit_saw_config"] is saw, key
        assert ("published_over_later_page" in g) is saw, key
        assert all(r["requests"] is None and r["isl"] == 1024 for r in g["steady_state_rows"])
    for key, (rows, median, worst, signed) in POOLED.items():
        part = report[key]
        assert (part["rows"], part["median_abs_pct_error"], part["max_abs_pct_error"], part["mean_signed_pct_error"]) == \
            pytest.approx((rows, median, worst, signed), abs=0.1), key
    # 0.20's own runs of the configurations the fit saw ran a little slower than the later pages' (median ratio per config)
    ratios = [g["published_over_later_page"][1] for g in report["groups"] if g["fit_saw_config"]]
    assert 0.95 <= sorted(ratios)[len(ratios) // 2] < 1.0
    assert report["all_reduce_bound"]["configs"] == [("llama-3.1-405b", "b200", 8, "FP4"), ("llama-3.3-70b", "b200", 4, "FP4"),
                                                     ("llama-3.3-70b", "b200", 8, "FP4"), ("llama-3.3-70b", "h100-sxm", 8, "FP8"),
                                                     ("llama-3.3-70b", "h200", 8, "FP8")]
    assert not any(r["bound"] == "TP all-reduce" for r in P.compare_published(None, published_rows("pytorch")))


def test_plan_quotes_the_all_reduce_caveat(tmp_path: Path, report: dict) -> None:
    """`pipeline plan` of a PyTorch-backend build bound by TP's all-reduce says how 0.20's runs so bound fared; one bound
    by something else, or an engine, gets no such caveat."""
    from pipeline.planner.entry import PlanSpec, plan

    bound_rows = report["all_reduce_bound"]
    raw = json.loads((Path(P.__file__).parents[1] / "data" / "published_models" / "llama-3.3-70b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    bound = plan(PlanSpec(model=tmp_path, gpu="h100", quant="fp8", tp=8, backend="pytorch", isl=128, osl=2048))
    assert bound.max_throughput.bound == "TP all-reduce"
    caveat, tpot = bound.caveats  # and what the silicon-measured serving runs say of the PyTorch backend's TPOT
    assert tpot.startswith("TPOT on the PyTorch backend")
    assert f"came out {bound_rows['median_abs_pct_error']:.1f}% fast in the median, {bound_rows['max_abs_pct_error']:.0f}% at worst" in caveat
    configs = POOLED["configs_the_fit_saw"]
    assert f"{configs[3]:+.1f}% on average" in caveat
    assert plan(PlanSpec(model=tmp_path, gpu="h100", quant="fp8", tp=8, backend="tensorrt", isl=128, osl=2048)).caveats == []
    unbound = plan(PlanSpec(model=tmp_path, gpu="h100", quant="fp8", tp=2, backend="pytorch", isl=128, osl=2048))
    assert unbound.max_throughput.bound != "TP all-reduce" and unbound.caveats == [tpot]


def test_aiconfigurator_beside_every_gpu(report: dict) -> None:
    per_gpu = {e["gpu"]: e for e in report["aiconfigurator"]["per_gpu"]}
    assert set(per_gpu) == set(AIC)
    for gpu, (theirs, ours) in AIC.items():
        assert_beside(per_gpu[gpu], theirs, ours, gpu)


# AIConfigurator's recorded estimates of the runs the page names a request count for, per GPU: its median / worst |error|
# beside ours (never fitted). Ours is better on every GPU, most on B200 (AIConfigurator's TP 2-8 rows there: 16-23% median).
AIC = {"b200": ((13.8, 71.6), (5.6, 28.5)), "h100-sxm": ((7.1, 45.5), (4.7, 22.6)), "h200": ((6.0, 59.8), (2.6, 18.2))}

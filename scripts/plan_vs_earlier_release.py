"""The PyTorch backend's shipped constants on an earlier release's published runs (pipeline/data/
trtllm_published_throughput_0_20.tsv: TensorRT-LLM 0.20's rows of Llama 3.1 8B, Llama 3.3 70B and Llama 3.1 405B), which no
fit sees. scripts/plan_vs_published.py calls it. About half its rows run at TP degrees the fit never saw (70B at TP 2-8 on
B200, TP 4 and 8 on H200, TP 1, 4 and 8 on H100; 405B at TP 8 on B200); the rest repeat a configuration (model, GPU, TP,
precision) of the 1.0 or 1.2-dev pages the fit reads, and say how far the two releases' own runs differ.
"""

from __future__ import annotations

import statistics
from typing import Any

from pipeline import planner as P
from pipeline.planner.published import bench_requests
from plan_vs_aiconfigurator import annotate, side_by_side
from plan_vs_more_models import mean_signed, signed_summary

TABLE = "pipeline/data/trtllm_published_throughput_0_20.tsv"


def _config(row: dict[str, Any]) -> tuple[str, str, int, str]:
    return row["model"], row["gpu"], int(row["tp"]), row["precision"]


def earlier_release_report() -> dict[str, Any]:
    """Every row predicted with the shipped PyTorch constants: per configuration, whether the fit saw it (on a later page),
    and, for the rows a later page also publishes, the ratio of the two pages' figures (0.20 over the later one)."""
    rows = P.compare_published(None, P.earlier_release_rows())
    aic = annotate(rows)
    # the page names no request count for its 1024/2048 runs, so they are planned in steady state, an upper bound: their
    # published figures sit within a few % of the same configuration's 1000/2000 run of 1500 requests. The figures to
    # quote leave them out; each group lists them apart.
    for r in rows:
        r["requests"] = bench_requests(r["trtllm_version"], r["isl"], r["osl"])
    counted = [r for r in rows if r["requests"] is not None]
    later = {(*_config(r), int(r["isl"]), int(r["osl"])): float(r["tokens_per_s"]) for r in P.published_rows("pytorch")}
    fitted_configs = {k[:4] for k in later}
    groups = []
    for config in sorted({_config(r) for r in rows}):
        group = [r for r in counted if _config(r) == config]
        ratios = [r["published_tokens_per_s"] / later[k] for r in group for k in [(*config, r["isl"], r["osl"])] if k in later]
        beside = side_by_side(group)  # AIConfigurator's figures for the rows it estimates
        groups.append({"model": config[0], "gpu": config[1], "tp": config[2], "precision": config[3],
                       "fit_saw_config": config in fitted_configs, "summary": P.error_summary(group),
                       "mean_signed_pct_error": round(mean_signed(group), 2),
                       **({"published_over_later_page": [round(min(ratios), 3), round(statistics.median(ratios), 3),
                                                         round(max(ratios), 3)]} if ratios else {}),
                       **({"aiconfigurator": beside[0]} if beside else {}), "rows": group,
                       "steady_state_rows": [r for r in rows if _config(r) == config and r["requests"] is None]})
    seen = [r for g in groups if g["fit_saw_config"] for r in g["rows"]]
    new = [r for g in groups if not g["fit_saw_config"] for r in g["rows"]]
    all_reduce = [r for r in counted if r["bound"] == "TP all-reduce"]
    aic["per_gpu"] = side_by_side(counted)
    return {"table": TABLE, "summary": signed_summary(counted), "with_steady_state_rows": signed_summary(rows),
            "configs_the_fit_saw": signed_summary(seen), "tp_the_fit_never_saw": signed_summary(new),
            "all_reduce_bound": {**signed_summary(all_reduce), "configs": sorted({_config(r) for r in all_reduce})},
            "groups": groups, "aiconfigurator": aic}


def report_lines(report: dict[str, Any]) -> list[str]:
    """What scripts/plan_vs_published.py prints of it."""
    prefix = "0.20's runs (never fitted):"
    lines = []
    for g in report["groups"]:
        versus = (f"; published / the later page's same rows {g['published_over_later_page'][1]:.3f}x (median)"
                  if "published_over_later_page" in g else "")
        aic = g.get("aiconfigurator")
        lines.append(f"{prefix} {g['model']:15s} {g['gpu']:9s} TP{g['tp']} {g['precision']} ({g['summary']['rows']:2d} rows, "
                     f"{'a configuration the fit saw' if g['fit_saw_config'] else 'a TP the fit never saw'}): median |error| "
                     f"{g['summary']['median_abs_pct_error']:5.1f}%, worst {g['summary']['max_abs_pct_error']:5.1f}%, mean signed "
                     f"{g['mean_signed_pct_error']:+.1f}%{versus}"
                     + (f"; AIConfigurator {aic['aiconfigurator_median_abs_pct_error']:.1f}% / "
                        f"{aic['aiconfigurator_max_abs_pct_error']:.1f}% on {aic['rows']} rows" if aic else ""))
    for name, key in (("the runs the page names a request count for", "summary"),
                      ("with its 1024/2048 runs too (no count named: planned in steady state)", "with_steady_state_rows"),
                      ("configurations the fit saw", "configs_the_fit_saw"), ("TP degrees the fit never saw", "tp_the_fit_never_saw"),
                      ("bound by TP's all-reduce (no PyTorch row of the fit is)", "all_reduce_bound")):
        part = report[key]
        lines.append(f"{prefix} {name}: median |error| {part['median_abs_pct_error']:.1f}%, worst {part['max_abs_pct_error']:.1f}% "
                     f"over {part['rows']} rows, mean signed {part['mean_signed_pct_error']:+.1f}%")
    lines += [f"{prefix} {e['gpu']:9s} ({e['rows']:3d} rows) AIConfigurator median/worst |error| "
              f"{e['aiconfigurator_median_abs_pct_error']:5.1f}% / {e['aiconfigurator_max_abs_pct_error']:5.1f}%; ours "
              f"{e['ours_in_sample_median_abs_pct_error']:5.1f}% / {e['ours_in_sample_max_abs_pct_error']:5.1f}%"
              for e in report["aiconfigurator"]["per_gpu"]]
    return lines


def plot_panel(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """plan_vs_published.plot's panel of these rows, one bar per configuration."""
    return {"0.20's runs (never fitted)": [
        {"value": f"{g['model']} {g['gpu']} TP{g['tp']} {g['precision']}{'' if g['fit_saw_config'] else ' (new TP)'}",
         **g["summary"], "comparison": g["rows"]} for g in report["groups"]]}

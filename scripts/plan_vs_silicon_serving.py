#!/usr/bin/env python
"""The planner's TTFT and TPOT at a concurrency against what NVIDIA measured on silicon for TensorRT-LLM serving
(pipeline/data/aiconfigurator_silicon_serving.tsv, the sample NVIDIA ships in AIConfigurator: Qwen3 32B FP8 on H100 on
TensorRT-LLM 1.0.0rc3, and Llama 3.1 70B FP4 and FP8 on B200 and FP8 on H200 on a release the sample does not name; TP
1-8, 4-128 concurrent requests; and, in pipeline/data/aiconfigurator_silicon_serving_more.tsv, Llama 3.1 8B in BF16 on
H100, which no fit reads), beside AIConfigurator's own estimate of each row. The throughput tables check max load
only, these check what `pipeline plan --slo` searches with. The PyTorch backend's shipped fit has seen their TPOT, at a
tenth of the throughput rows' weight (scripts/plan_vs_published.py SERVING_SHARE), so the figures printed here are in
sample; the figure to quote is each GPU's or model's rows predicted by the fold that held it out
(`scripts/plan_vs_published.py --cv`, also in `make plan-check`).

    .venv/bin/python scripts/plan_vs_silicon_serving.py [--out DIR] [--refit-check]

Each row is planned as pipeline/planner/serving_sample.py says (the PyTorch backend's shipped constants, the build the
sample does not spell out taken as TensorRT-LLM's defaults); p50 TTFT and TPOT (planner.slo.latency) are compared with
the sample's means. A row whose requests do not all fit the KV cache at once queues (TTFT then grows by whole waves of
requests): its TTFT is reported apart.

--refit-check shows what adding these rows' TPOT to the PyTorch backend's fit does: it fits the constants on the
published throughput rows alone and with these rows (the shipped procedure), cross-validated by GPU and by model, and
prints the held-out throughput and TPOT figures of each. A fold holding out a model holds out the rows of a model of the
same shapes (Llama 3.1 70B's are Llama 3.3 70B's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import planner as P  # noqa: E402
from pipeline.core.artifacts import write_json_atomic  # noqa: E402
from pipeline.core.figures import write_figure_atomic  # noqa: E402
from pipeline.core.paths import build_root  # noqa: E402
from pipeline.planner.calibrate import fit_factor_offset  # noqa: E402
from pipeline.planner.serving_sample import (MORE_TABLE, TABLE, compare_serving, error_stats, serving_error_summary,  # noqa: E402
                                             more_serving_rows, serving_rows)

METRICS = ("tpot", "ttft")
MIN_ROWS = 5


def _release(row: dict[str, Any]) -> str:
    return row["trtllm_version"] or "release not named"


def groups(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The rows by model, GPU, precision and the TensorRT-LLM release that ran them."""
    keys = sorted({(r["model"], r["gpu"], r["precision"], _release(r)) for r in rows})
    return [(" ".join(key), [r for r in rows if (r["model"], r["gpu"], r["precision"], _release(r)) == key]) for key in keys]


def report(efficiency: P.Efficiency | None = None) -> dict[str, Any]:
    """Each measured row of both tables beside the planner's p50 (the PyTorch backend's shipped constants unless
    `efficiency` is given) and AIConfigurator's estimate, and the figures over them."""
    efficiency = efficiency or P.efficiency_for("pytorch")
    rows, more = compare_serving(serving_rows(), efficiency), compare_serving(more_serving_rows(), efficiency)
    return {"table": f"pipeline/data/{TABLE}", "rows": rows, **_figures(rows), "calibrated_elsewhere": calibration_check(rows),
            "never_fitted": {"table": f"pipeline/data/{MORE_TABLE}", "rows": more, **_figures(more)}}


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """TPOT per group and per concurrency, TTFT of the rows admitted at once and of those that queued."""
    admitted = [r for r in rows if not r["queued"]]
    runs = sorted({(r["model"], _release(r)) for r in rows})
    return {
        "tpot": {"all": serving_error_summary(rows, "tpot"),
                 **{name: serving_error_summary(part, "tpot") for name, part in groups(rows)}},
        "ttft": {"admitted": serving_error_summary(admitted, "ttft"),
                 "queued": serving_error_summary([r for r in rows if r["queued"]], "ttft")},
        "tpot_by_concurrency": {f"{model} ({release})": _by_concurrency(
            [r for r in rows if (r["model"], _release(r)) == (model, release)]) for model, release in runs},
    }


def calibration_check(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What `pipeline plan --calibrate` makes of the TPOT bias: per deployment (model, GPU, precision, TP, release), the
    factor and offset calibrate.fit_factor_offset fits on its first ISL/OSL's rows (every concurrency), applied to its
    other ISL/OSLs' rows: their |error| % before and after."""
    deployments: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        deployments.setdefault((r["model"], r["gpu"], r["precision"], r["tp"], _release(r)), []).append(r)
    before, after, calibrated, offsets = [], [], 0, 0
    for part in deployments.values():
        first = min((r["isl"], r["osl"]) for r in part)
        bench = [r for r in part if (r["isl"], r["osl"]) == first]
        if len(bench) == len(part):
            continue  # one ISL/OSL only: nothing to carry the calibration to
        factor, offset = fit_factor_offset([(r["tpot"]["measured"], r["tpot"]["predicted"]) for r in bench])
        calibrated, offsets = calibrated + 1, offsets + (offset > 0)
        for r in part:
            if r not in bench:
                before.append(r["tpot"]["error_pct"])
                after.append(round(100 * ((factor * r["tpot"]["predicted"] + offset) / r["tpot"]["measured"] - 1), 1))
    return {"deployments": calibrated, "with_an_offset": offsets, "before": error_stats(before), "after": error_stats(after)}


def _by_concurrency(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """TPOT figures per concurrency of one model's grid (those with at least MIN_ROWS rows)."""
    parts = {c: [r for r in rows if r["concurrency"] == c] for c in sorted({r["concurrency"] for r in rows})}
    return {str(c): serving_error_summary(part, "tpot") for c, part in parts.items() if len(part) >= MIN_ROWS}


def _line(label: str, figures: dict[str, Any]) -> str:
    ours, aic = figures["ours"], figures["aiconfigurator"]
    text = (f"{label:44} ({ours['rows']:3} rows) ours median/worst |error| {ours['median_abs_pct_error']:5.1f}% / "
            f"{ours['max_abs_pct_error']:6.1f}%, mean signed {ours['mean_signed_pct']:+6.1f}%")
    if aic["rows"]:
        text += (f"; AIConfigurator {aic['median_abs_pct_error']:5.1f}% / {aic['max_abs_pct_error']:6.1f}%, "
                 f"{aic['mean_signed_pct']:+6.1f}%")
    return text


def figure_lines(result: dict[str, Any]) -> list[str]:
    out = [_line(f"TPOT {name}", figures) for name, figures in result["tpot"].items()]
    out += [_line(f"TPOT {model} at {c}", figures) for model, by in result["tpot_by_concurrency"].items()
            for c, figures in by.items()]
    return out + [_line(f"TTFT {name}", figures) for name, figures in result["ttft"].items() if figures["ours"]["rows"]]


def lines(result: dict[str, Any]) -> list[str]:
    out = [f"(in the PyTorch fit at a tenth of the weight): {line}" for line in figure_lines(result)]
    out += [f"(a model added after the fit, never fitted): {line}" for line in figure_lines(result["never_fitted"])]
    check = result["calibrated_elsewhere"]
    before, after = check["before"], check["after"]
    out.append(f"(in the PyTorch fit at a tenth of the weight): TPOT calibrated on one ISL/OSL of each of "
               f"{check['deployments']} deployments, at their other ISL/OSLs "
               f"({before['rows']} rows): median/worst |error| {before['median_abs_pct_error']:.1f}% / "
               f"{before['max_abs_pct_error']:.1f}% -> {after['median_abs_pct_error']:.1f}% / {after['max_abs_pct_error']:.1f}% "
               f"({check['with_an_offset']} fits with an offset, the rest a factor alone)")
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, metric in zip(axes, METRICS):
        rows = [r for r in result["rows"] if metric == "tpot" or not r["queued"]]
        more = [r for r in result["never_fitted"]["rows"] if metric == "tpot" or not r["queued"]]
        measured = [r[metric]["measured"] for r in rows + more]
        ax.scatter([r[metric]["measured"] for r in rows], [r[metric]["predicted"] for r in rows], s=12,
                   label="pipeline plan (fitted at a tenth of the weight)")
        ax.scatter([r[metric]["measured"] for r in more], [r[metric]["predicted"] for r in more], s=12,
                   label="pipeline plan (Llama 3.1 8B BF16, never fitted)")
        answered = [r for r in rows + more if r[metric]["aiconfigurator"] is not None]
        ax.scatter([r[metric]["measured"] for r in answered], [r[metric]["aiconfigurator"] for r in answered], s=12,
                   marker="x", label="AIConfigurator")
        low, high = min(measured), max(measured)
        ax.plot([low, high], [low, high], color="grey", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {metric.upper()} (ms)")
        ax.set_ylabel(f"predicted {metric.upper()} (ms)")
        ax.set_title(f"{metric.upper()}" + (" (requests admitted at once)" if metric == "ttft" else ""))
        ax.legend()
    fig.suptitle("TensorRT-LLM serving (Llama 3.1 70B and 8B, Qwen3 32B): silicon vs predicted (AIConfigurator's sample)")
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=120)


def refit_check() -> list[str]:
    """Held-out throughput and TPOT of the PyTorch backend's fit without and with (shipped) the serving rows' TPOT."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from plan_vs_published import cross_validate, cross_validated_error, fit, held_out_serving_tpot

    rows, serving = P.published_rows("pytorch"), serving_rows()
    out = []
    for label, fit_serving in (("throughput rows alone", False), ("with the serving rows' TPOT (shipped)", True)):
        out.append(f"{label}: constants {fit(rows, serving=serving if fit_serving else None).as_dict()}")
        for by in ("gpu", "model"):
            folds = cross_validate(rows, by, serving=serving, fit_serving=fit_serving)
            pooled = cross_validated_error(folds)
            held_out = held_out_serving_tpot(folds)
            tpot = held_out["ours"] if held_out else {"rows": 0}
            per_fold = ", ".join(f"{f['value']} {f['median_abs_pct_error']:.1f}%" for f in folds)
            out.append(f"  {by} held out: throughput median/worst |error| {pooled['median_abs_pct_error']:.1f}% / "
                       f"{pooled['max_abs_pct_error']:.1f}% ({per_fold})"
                       + (f"; TPOT of the held-out serving rows {tpot['median_abs_pct_error']:.1f}% / "
                          f"{tpot['max_abs_pct_error']:.1f}%, mean signed {tpot['mean_signed_pct']:+.1f}% ({tpot['rows']} rows)"
                          if tpot["rows"] else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=build_root() / "reports" / "plan_vs_silicon_serving")
    parser.add_argument("--refit-check", action="store_true",
                        help="fit the PyTorch backend's constants without and with these rows' TPOT, cross-validated (~1 min)")
    args = parser.parse_args(argv)
    if args.refit_check:
        for line in refit_check():
            print(line)
        return 0
    result = report()
    for line in lines(result):
        print(f"silicon serving {line}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "plan_vs_silicon_serving.json", result)
    plot(result, args.out / "plan_vs_silicon_serving.png")
    print(f"wrote {args.out}/plan_vs_silicon_serving.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

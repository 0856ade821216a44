#!/usr/bin/env python
"""The planner against TensorRT-LLM's published throughput: a table, JSON and a PNG; `--fit` refits the
GLOBAL efficiency constants of pipeline/planner/rates.py (bandwidth, 16-bit and 8-bit compute, per-layer step
overhead) on the published rows, and `--cv` checks how well constants fitted on three GPUs predict
the fourth (a proxy for rows the fit has never seen).

    .venv/bin/python scripts/plan_vs_published.py [--fit] [--cv] [--out DIR]

The constants are shared by every GPU, precision, model and row; nothing is fitted per row or per GPU.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline import planner as P  # noqa: E402
from pipeline.core.artifacts import write_json_atomic  # noqa: E402
from pipeline.core.output import OUT, simple_table  # noqa: E402
from pipeline.core.paths import build_root  # noqa: E402

DEFAULT_TSV = REPO.parent / "shared" / "reference" / "trtllm_published_throughput.tsv"
DEFAULT_MODEL = REPO / "tests" / "fixtures" / "llama-3.1-8b"


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def log_loss(model: P.ModelSpec, rows: list[dict[str, str]], eff: P.Efficiency) -> float:
    """Sum of squared log ratios: a relative error that treats over- and under-prediction alike."""
    return sum(math.log(1 + r["error_pct"] / 100) ** 2 for r in P.compare_published(model, rows, efficiency=eff))


def fit(model: P.ModelSpec, rows: list[dict[str, str]], start: P.Efficiency) -> P.Efficiency:
    """Nelder-Mead over the four global constants, kept inside physical bounds."""
    from scipy.optimize import minimize

    def unpack(x) -> P.Efficiency:
        return P.Efficiency(bandwidth=x[0], compute_16bit=x[1], compute_8bit=x[2], step_overhead_per_layer_s=x[3] * 1e-6)

    def loss(x) -> float:
        if not (0.2 < x[0] <= 1 and 0.1 < x[1] <= 1 and 0.1 < x[2] <= 1 and 0 <= x[3] < 500):
            return 1e9
        return log_loss(model, rows, unpack(x))

    x0 = [start.bandwidth, start.compute_16bit, start.compute_8bit, start.step_overhead_per_layer_s * 1e6]
    result = minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 800})
    x = result.x
    return unpack([round(x[0], 2), round(x[1], 2), round(x[2], 2), round(x[3], 1)])


def cross_validate(model: P.ModelSpec, rows: list[dict[str, str]], start: P.Efficiency) -> list[dict[str, Any]]:
    """Leave one GPU out: fit on the other GPUs, report the error on the one left out."""
    out = []
    for gpu in sorted({r["gpu"] for r in rows}):
        train = [r for r in rows if r["gpu"] != gpu]
        test = [r for r in rows if r["gpu"] == gpu]
        eff = fit(model, train, start)
        if not any(r["precision"] != "FP8" for r in train):  # nothing in training decides 16-bit GEMMs
            eff = replace(eff, compute_16bit=start.compute_16bit)
        comparison = P.compare_published(model, test, efficiency=eff)
        out.append({"held_out_gpu": gpu, "constants": eff.as_dict(), "median_abs_pct_error": P.median_abs_pct_error(comparison),
                    "max_abs_pct_error": max(abs(r["error_pct"]) for r in comparison), "rows": comparison})
    return out


def cross_validated_error(folds: list[dict[str, Any]]) -> dict[str, Any]:
    """The figure to quote: every row predicted by constants fitted without its GPU, pooled."""
    held_out = [row for fold in folds for row in fold["rows"]]
    return {"rows": len(held_out), "median_abs_pct_error": P.median_abs_pct_error(held_out),
            "max_abs_pct_error": max(abs(r["error_pct"]) for r in held_out)}


def plot(comparison: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    for gpu in sorted({r["gpu"] for r in comparison}):
        pts = [r for r in comparison if r["gpu"] == gpu]
        ax.scatter([r["published_tokens_per_s"] for r in pts], [r["predicted_tokens_per_s"] for r in pts], label=gpu, s=28)
    lo = min(min(r["published_tokens_per_s"], r["predicted_tokens_per_s"]) for r in comparison) * 0.7
    hi = max(max(r["published_tokens_per_s"], r["predicted_tokens_per_s"]) for r in comparison) * 1.4
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="predicted = published")
    ax.plot([lo, hi], [lo * 1.25, hi * 1.25], "k:", lw=0.8, label="±25%")
    ax.plot([lo, hi], [lo * 0.75, hi * 0.75], "k:", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published output tokens/s (TensorRT-LLM v0.17, trtllm-bench)")
    ax.set_ylabel("pipeline plan prediction")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tsv", type=Path, default=DEFAULT_TSV, help="published throughput table")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="HF folder or config.json of the model in the table")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: build/reports/plan_vs_published)")
    parser.add_argument("--fit", action="store_true", help="refit the global constants on these rows (paste them into pipeline/planner/rates.py)")
    parser.add_argument("--cv", action="store_true", help="leave-one-GPU-out cross-validation of the fit")
    args = parser.parse_args(argv)

    model = P.model_spec_from_config(args.model)
    rows = read_rows(args.tsv)
    eff = fit(model, rows, P.EFFICIENCY) if args.fit else P.EFFICIENCY
    comparison = P.compare_published(model, rows, efficiency=eff)
    mdape = P.median_abs_pct_error(comparison)
    table_rows = [
        [r["gpu"], r["tp"], r["precision"], r["isl"], r["osl"], f"{r['published_tokens_per_s']:,.0f}",
         f"{r['predicted_tokens_per_s']:,.0f}", f"{r['error_pct']:+.1f}%", r["batch"], r["bound"]]
        for r in comparison
    ]
    OUT.stdout.print(simple_table(
        f"pipeline plan vs published ({model.name}); constants {eff.as_dict()}",
        ["gpu", "tp", "prec", "isl", "osl", "published", "predicted", "error", "batch", "bound by"], table_rows,
    ))
    worst = max(comparison, key=lambda r: abs(r["error_pct"]))
    OUT.stdout.print(f"median absolute error {mdape:.2f}% over {len(comparison)} rows; worst {worst['gpu']} "
                     f"{worst['isl']}/{worst['osl']} {worst['error_pct']:+.1f}%", highlight=False)
    report: dict[str, Any] = {
        "model": model.name, "tsv": str(args.tsv), "constants": eff.as_dict(), "fitted_now": args.fit,
        "median_abs_pct_error": mdape, "rows": comparison,
    }
    if args.cv:
        report["leave_one_gpu_out"] = cross_validate(model, rows, P.EFFICIENCY)
        for item in report["leave_one_gpu_out"]:
            OUT.stdout.print(f"held out {item['held_out_gpu']:10s}: median |error| {item['median_abs_pct_error']:.1f}%, "
                             f"max {item['max_abs_pct_error']:.1f}% with {item['constants']}", highlight=False)
        pooled = report["cross_validated"] = cross_validated_error(report["leave_one_gpu_out"])
        OUT.stdout.print(f"cross-validated (each GPU's rows predicted by constants fitted on the others): median |error| "
                         f"{pooled['median_abs_pct_error']:.1f}% over {pooled['rows']} rows, max "
                         f"{pooled['max_abs_pct_error']:.1f}% (in-sample: {mdape:.1f}%)", highlight=False)
    out = args.out or build_root() / "reports" / "plan_vs_published"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "plan_vs_published.json", report)
    plot(comparison, out / "plan_vs_published.png", f"{model.name}: median |error| {mdape:.1f}% over {len(comparison)} rows")
    OUT.info(f"wrote {out / 'plan_vs_published.json'} and {out / 'plan_vs_published.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

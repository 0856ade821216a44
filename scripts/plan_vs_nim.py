"""The planner's closed-loop predictions against NVIDIA's published NIM serving figures (pipeline/data/
nim_published_serving.tsv: Llama 3.3 70B FP8 on 2x H100 at TP 2, NIM 1.8, a TensorRT-LLM engine, AIPerf at 1-250
concurrent clients), which no fit sees. The throughput tables check trtllm-bench's max load only; these check what
`pipeline plan --slo` searches with: TTFT, TPOT and tokens/s at a concurrency (planner.slo.latency: p50 is
planner.timing.predict, p99 its burst-and-waves bound), with the engines' shipped constants, on the build `pipeline
plan` recommends for each goal (the page does not say which of NIM's latency or throughput profiles ran).

    .venv/bin/python scripts/plan_vs_nim.py [--out DIR]

Published TTFT and ITL are AIPerf's means; ITL is TPOT (the time between a request's tokens after its first). A row whose
concurrency exceeds the build's batch queues (TTFT grows with the queue); the figures are reported apart for those.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import planner as P  # noqa: E402
from pipeline.core.artifacts import write_json_atomic  # noqa: E402
from pipeline.core.figures import write_figure_atomic  # noqa: E402
from pipeline.core.paths import build_root  # noqa: E402
from pipeline.data import packaged_fact_rows  # noqa: E402
from pipeline.planner.recommend import recommend  # noqa: E402
from pipeline.planner.slo import latency  # noqa: E402

TABLE = "nim_published_serving.tsv"
GOALS = ("throughput", "latency")
METRICS = {"ttft": ("ttft_ms", "ttft_p50_ms"), "tpot": ("itl_ms", "tpot_p50_ms"),
           "tokens_per_s": ("tokens_per_s", "output_tokens_per_s")}


def nim_rows() -> list[dict[str, str]]:
    return packaged_fact_rows(TABLE)


def _pct(predicted: float, published: float) -> float:
    return round(100 * (predicted - published) / published, 1)


def compare(goal: str) -> list[dict[str, Any]]:
    """Each published row beside the prediction on the build `pipeline plan` recommends for `goal`."""
    out = []
    eff = P.efficiency_for("tensorrt")
    for row in nim_rows():
        scenario = P.published_scenario(P.published_model(row["model"]), row)
        build = recommend(scenario, goal)
        predicted = latency(scenario, int(row["concurrency"]), build, eff)
        entry: dict[str, Any] = {
            "isl": int(row["isl"]), "osl": int(row["osl"]), "concurrency": int(row["concurrency"]),
            "max_batch_size": build["max_batch_size"], "max_num_tokens": build["max_num_tokens"], "batch": predicted.batch,
            "queued": int(row["concurrency"]) > predicted.batch, "ttft_p99_ms": predicted.ttft_p99_ms,
        }
        for metric, (published_key, predicted_key) in METRICS.items():
            value = getattr(predicted, predicted_key)
            entry[metric] = {"published": float(row[published_key]), "predicted": value,
                             "error_pct": _pct(value, float(row[published_key]))}
        out.append(entry)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst |error| % per metric, and how many published mean TTFTs our p99 TTFT covers."""
    result: dict[str, Any] = {"rows": len(rows)}
    for metric in METRICS:
        errors = [abs(r[metric]["error_pct"]) for r in rows]
        result[metric] = {"median_abs_pct_error": round(statistics.median(errors), 1), "max_abs_pct_error": max(errors),
                          "mean_signed_pct": round(statistics.fmean(r[metric]["error_pct"] for r in rows), 1)}
    result["ttft_p99_covers_published_mean"] = sum(r["ttft_p99_ms"] >= r["ttft"]["published"] for r in rows)
    return result


def nim_report() -> dict[str, Any]:
    report: dict[str, Any] = {"table": f"pipeline/data/{TABLE}"}
    for goal in GOALS:
        rows = compare(goal)
        report[goal] = {"rows": rows, **{name: summary(group) for name, group in _groups(rows).items() if group}}
    return report


def _groups(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One client (TTFT is one prompt's prefill), several within the build's batch, and more clients than it holds."""
    return {"one_client": [r for r in rows if r["concurrency"] == 1],
            "in_batch": [r for r in rows if 1 < r["concurrency"] and not r["queued"]],
            "queued": [r for r in rows if r["queued"]]}


def report_lines(report: dict[str, Any]) -> list[str]:
    lines = ["NIM 1.8 serving, Llama 3.3 70B FP8 on 2x H100 (TP 2), never fitted: predicted / published "
             "(TTFT ms, TPOT ms, tokens/s)"]
    for goal in GOALS:
        part = report[goal]
        first = part["rows"][0]
        lines.append(f"  {goal} build (max_batch_size {first['max_batch_size']}, max_num_tokens {first['max_num_tokens']}):")
        for r in part["rows"]:
            cells = "  ".join(f"{m} {r[m]['predicted']:>9.1f} / {r[m]['published']:>9.1f} ({r[m]['error_pct']:+.0f}%)" for m in METRICS)
            lines.append(f"    {r['isl']}/{r['osl']} c{r['concurrency']:<3} {cells}{'  queued' if r['queued'] else ''}")
        for name in ("one_client", "in_batch", "queued"):
            s = part.get(name)
            if s:
                figures = ", ".join(f"{m} {s[m]['median_abs_pct_error']}% / {s[m]['max_abs_pct_error']}% ({s[m]['mean_signed_pct']:+}%)"
                                    for m in METRICS)
                lines.append(f"    {name} ({s['rows']}): {figures}; p99 TTFT >= published mean TTFT on "
                             f"{s['ttft_p99_covers_published_mean']}/{s['rows']}")
    return lines


def plot(report: dict[str, Any], path: Path) -> None:
    """TTFT, TPOT and tokens/s against the clients of the 5000/500 table: published, and predicted on each goal's build
    (TTFT: p50 and p99)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    for ax, metric, label in zip(axes, METRICS, ("TTFT (ms)", "TPOT / ITL (ms)", "output tokens/s")):
        published = [r for r in report["throughput"]["rows"] if r["isl"] == 5000]
        ax.plot([r["concurrency"] for r in published], [r[metric]["published"] for r in published], "ko-", label="NIM 1.8, published")
        for goal, style in zip(GOALS, ("s--", "^--")):
            rows = [r for r in report[goal]["rows"] if r["isl"] == 5000]
            ax.plot([r["concurrency"] for r in rows], [r[metric]["predicted"] for r in rows], style,
                    label=f"predicted, {goal} build" + (" (p50)" if metric == "ttft" else ""))
            if metric == "ttft":
                ax.plot([r["concurrency"] for r in rows], [r["ttft_p99_ms"] for r in rows], style[0] + ":",
                        label=f"predicted p99, {goal} build")
        ax.set(xscale="log", yscale="log" if metric == "ttft" else "linear", xlabel="concurrent clients", ylabel=label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("pipeline plan vs NVIDIA NIM's published serving: Llama 3.3 70B FP8, 2x H100 (TP 2), 5000/500", fontsize=10)
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="default: build/reports/plan_vs_published")
    args = parser.parse_args(argv)
    report = nim_report()
    print("\n".join(report_lines(report)))
    out = args.out or build_root() / "reports" / "plan_vs_published"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "plan_vs_nim.json", report)
    plot(report, out / "plan_vs_nim.png")
    print(f"wrote {out / 'plan_vs_nim.json'} and plan_vs_nim.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

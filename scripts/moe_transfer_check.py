"""How well an MoE shape's timing carries over from one GPU to another (pipeline/planner/moe_timing.py), checked against
silicon: every measured shape of data/trtllm_moe_latency.tsv is held out in turn and carried over from the rest, and its
median |error| over its measured token counts (64 to 16,384: decode batches to long prefills) is compared with what was
measured. Per GPU: keys checked, median, 90th percentile and worst of those per-key errors.

    .venv/bin/python scripts/moe_transfer_check.py [--out DIR]     (default build/reports/moe_transfer_check; ~5 s)

The per-GPU figures are the ones the planner's caveat quotes (caveats.CARRIED_OVER_ERROR), asserted in
tests/unit/planner/test_moe_timing.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pipeline.core.artifacts import write_json_atomic  # noqa: E402
from pipeline.core.figures import write_figure_atomic  # noqa: E402
from pipeline.planner.moe_timing import held_out_errors  # noqa: E402


def summary(errors: dict[str, list[float]]) -> list[dict[str, float | int | str]]:
    """Per GPU: keys, median, 90th percentile (nearest rank) and worst of the per-key median |error| %."""
    out = []
    for gpu, values in sorted(errors.items()):
        ranked = sorted(values)
        out.append({"gpu": gpu, "keys": len(ranked), "median_abs_pct_error": round(statistics.median(ranked), 1),
                    "p90_abs_pct_error": round(ranked[int(0.9 * len(ranked))], 1), "max_abs_pct_error": round(ranked[-1], 1)})
    return out


def plot(rows: list[dict[str, float | int | str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["median_abs_pct_error"] for r in rows], width=0.4, label="median")
    ax.bar([i + 0.2 for i in x], [r["p90_abs_pct_error"] for r in rows], width=0.4, label="90th percentile")
    ax.set_xticks(list(x), [f"{r['gpu']}\n({r['keys']})" for r in rows], fontsize=8)
    ax.set_ylabel("|error| vs silicon, %")
    ax.set_title("MoE layer time carried over from another GPU, each shape held out", fontsize=10)
    ax.legend()
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "reports" / "moe_transfer_check")
    args = parser.parse_args(argv)
    rows = summary(held_out_errors())
    print(f"{'gpu':<14}{'keys':>6}{'median':>9}{'p90':>8}{'worst':>8}   (|error| % vs silicon, each shape held out)")
    for r in rows:
        print(f"{r['gpu']:<14}{r['keys']:>6}{r['median_abs_pct_error']:>8.1f}%{r['p90_abs_pct_error']:>7.1f}%"
              f"{r['max_abs_pct_error']:>7.0f}%")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "moe_transfer_check.json",
                      {"table": "pipeline/data/trtllm_moe_latency.tsv", "tokens": [64, 16384], "per_gpu": rows})
    plot(rows, args.out / "moe_transfer_check.png")
    print(f"wrote {args.out}/moe_transfer_check.json and .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

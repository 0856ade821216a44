"""PNG plots of a bench run (matplotlib, no display): TTFT and TPOT vs concurrency, throughput vs
latency (Pareto), TTFT vs ISL, and the prefill/decode sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from pipeline.core.figures import write_figure_atomic


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_all(result: Any, folder: Path) -> dict[str, Path]:
    plt = _pyplot()
    files: dict[str, Path] = {}
    sweep = [lv for lv in result.levels if lv.get("concurrency") and lv["completed"]]
    if sweep:
        files["ttft_tpot_vs_concurrency"] = _vs_concurrency(plt, sweep, folder / "ttft_tpot_vs_concurrency.png")
    measured = [lv for lv in result.levels if lv["completed"]]
    if measured:
        files["throughput_vs_latency"] = _pareto(plt, measured, folder / "throughput_vs_latency.png")
    points = [(m.isl, m.ttft_ms) for metrics in result.requests for m in metrics if m.ok]
    if points:
        files["ttft_vs_isl"] = _ttft_vs_isl(plt, points, folder / "ttft_vs_isl.png")
    if result.prefill_decode:
        files["prefill_decode"] = _prefill_decode(plt, result.prefill_decode, folder / "prefill_decode.png")
    return files


def _label(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=100)
    return path


def _vs_concurrency(plt, sweep: Sequence[dict[str, Any]], path: Path) -> Path:
    xs = [lv["concurrency"] for lv in sweep]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "ttft_ms", "TTFT (ms)"), (axes[1], "tpot_ms", "TPOT (ms/token)")):
        for stat, style in (("p50", "o-"), ("p99", "s--")):
            ys = [lv[key][stat] for lv in sweep]
            if any(y is not None for y in ys):
                ax.plot(xs, [float("nan") if y is None else y for y in ys], style, label=stat)
        ax.set_xscale("log", base=2)
        _label(ax, "concurrency", title, f"{title} vs concurrency")
        ax.legend()
    return _save(fig, path)


def _pareto(plt, levels: Sequence[dict[str, Any]], path: Path) -> Path:
    xs = [lv["output_tok_s_per_user"]["p50"] or 0.0 for lv in levels]
    ys = [lv["output_tok_s"] for lv in levels]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(xs, ys, "o-")
    for x, y, lv in zip(xs, ys, levels):
        ax.annotate(lv["load"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    _label(ax, "output tokens/s per user (p50) - interactivity", "output tokens/s total - throughput",
           "Throughput vs latency (Pareto)")
    return _save(fig, path)


def _ttft_vs_isl(plt, points: Sequence[tuple[int, float]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.scatter([p[0] for p in points], [p[1] for p in points], s=10, alpha=0.6)
    _label(ax, "ISL (tokens)", "TTFT (ms)", "TTFT vs prompt length")
    return _save(fig, path)


def _prefill_decode(plt, pd: dict[str, Any], path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    isl, osl = pd["isl_sweep"], pd["osl_sweep"]
    axes[0].plot([p["isl"] for p in isl], [p["ttft_ms_p50"] or float("nan") for p in isl], "o-")
    _label(axes[0], f"ISL (tokens), OSL = {pd['fixed_osl']}", "TTFT p50 (ms)", "Prefill: TTFT vs ISL")
    axes[1].plot([p["osl"] for p in osl], [p["tpot_ms_p50"] or float("nan") for p in osl], "o-")
    _label(axes[1], f"OSL (tokens), ISL = {pd['fixed_isl']}", "TPOT p50 (ms/token)", "Decode: TPOT vs output length")
    return _save(fig, path)


def plot_speedup(rows: Sequence[dict[str, Any]], break_even: int | None, path: Path) -> Path:
    """Speculation's speedup (output tokens/s with / without) against concurrency, 1x and the break-even marked."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["concurrency"])
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot([r["concurrency"] for r in rows], [float("nan") if r["speedup"] is None else r["speedup"] for r in rows],
            "o-", label="speedup (output tok/s)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    if break_even is not None:
        ax.axvline(break_even, color="red", linestyle=":", label=f"break-even c={break_even}")
    for r in rows:
        if r.get("acceptance_rate") is not None:
            ax.annotate(f"a={r['acceptance_rate']:.2f}", (r["concurrency"], r["speedup"] or 0.0),
                        textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log", base=2)
    _label(ax, "concurrency", "speedup (x)", "Speculative decoding: speedup vs concurrency")
    ax.legend()
    return _save(fig, path)

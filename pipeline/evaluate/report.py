"""The reports of one evaluation: the table, Markdown, CSV and a PNG plot (the JSON is the cache's)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from pipeline.core.artifacts import write_text_atomic
from pipeline.core.figures import write_figure_atomic
from pipeline.evaluate.gate import pct
from pipeline.evaluate.spec import EvaluateResult

REPORT_STEM = "evaluate"


TABLE_COLUMNS = ("format", "KV cache", "perplexity", "delta", "top-1 agreement", "top-1 accuracy", "KV measured", "gate")


def table_rows(result: EvaluateResult) -> list[list[str]]:
    rows = []
    for row in result.rows():
        is_base = row.name == "baseline"
        rows.append(
            [
                f"baseline ({row.quant})" if is_base else row.name,
                row.kv_cache,
                f"{row.perplexity:.3f}",
                "-" if is_base else pct(row.delta),
                f"{row.top1_agreement:.4f}",
                f"{row.top1_accuracy:.4f}",
                "-" if row.kv_measured is None else ("yes" if row.kv_measured else "NO"),
                "-" if is_base else ("pass" if row.passed else "FAIL"),
            ]
        )
    return rows


def markdown_table(result: EvaluateResult) -> str:
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(result)]
    return "\n".join(lines)


def markdown_report(result: EvaluateResult) -> str:
    data = result.dataset
    parts = [
        f"# Quantization accuracy: {result.model}",
        "",
        f"- checkpoint: `{result.hf_dir}`",
        f"- evaluation data: {data['name']} ({data['texts']} texts, {data['windows']} windows of <= {data['max_len']} "
        f"tokens, {data['tokens']} scored tokens)",
        f"- calibration texts: {data['calibration_texts']}",
        f"- gate: perplexity may rise at most {pct(result.max_delta)} over the baseline -> "
        f"**{'PASSED' if result.passed else 'FAILED: ' + ', '.join(result.failed)}**",
        "",
        markdown_table(result),
        "",
        "How each row was computed:",
        "",
    ]
    parts += [f"- {row.name}: {row.simulation}" + (f" ({row.note})" if row.note else "") for row in result.rows()]
    parts += [
        "",
        "Perplexity = exp(mean next-token negative log-likelihood); top-1 agreement = share of positions where the "
        "format's most likely next token equals the baseline's; top-1 accuracy = share where it equals the text's.",
        "",
    ]
    return "\n".join(parts)


def write_reports(result: EvaluateResult, folder: Path) -> dict[str, Path]:
    """evaluate.csv, evaluate.md and evaluate.png into folder (the JSON is written by the caller)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    fields = ["name", "quant", "kv_cache", "perplexity", "delta", "top1_agreement", "top1_accuracy", "tokens",
              "kv_measured", "passed", "quantize_s", "eval_s", "simulation", "note"]
    writer.writerow(fields)
    for row in result.rows():
        values = row.model_dump()
        writer.writerow(["" if values[f] is None else values[f] for f in fields])
    paths = {
        "json": folder / f"{REPORT_STEM}.json",
        "csv": folder / f"{REPORT_STEM}.csv",
        "markdown": folder / f"{REPORT_STEM}.md",
        "plot": folder / f"{REPORT_STEM}.png",
    }
    write_text_atomic(paths["csv"], buffer.getvalue())
    write_text_atomic(paths["markdown"], markdown_report(result))
    plot_result(result, paths["plot"])
    return paths


def plot_result(result: EvaluateResult, path: Path) -> None:
    """Two bar charts: perplexity per format (with the gate's limit) and top-1 agreement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows()
    names = [f"baseline\n({r.quant})" if r.name == "baseline" else r.name.replace("+", "\n+") for r in rows]
    colors = ["#7f7f7f"] + ["#2ca02c" if r.passed else "#d62728" for r in rows[1:]]
    ppl = [r.perplexity if math.isfinite(r.perplexity) else float("nan") for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(rows) + 4), 4.5))
    left.bar(names, ppl, color=colors)
    limit = result.baseline.perplexity * (1 + result.max_delta)
    left.axhline(limit, color="#d62728", linestyle="--", linewidth=1, label=f"gate: +{result.max_delta:.0%}")
    left.axhline(result.baseline.perplexity, color="#7f7f7f", linestyle=":", linewidth=1, label="baseline")
    left.set_ylabel("perplexity (lower is better)")
    left.set_title("Perplexity")
    left.legend(loc="upper left", fontsize=8)
    for x, value in enumerate(ppl):
        if math.isfinite(value):
            left.annotate(f"{value:.2f}", (x, value), ha="center", va="bottom", fontsize=8)
    agreement = [r.top1_agreement for r in rows]
    right.bar(names, agreement, color=colors)
    right.set_ylim(max(0.0, min(0.5, min(agreement) - 0.05)), 1.06)
    right.set_ylabel("top-1 agreement with baseline")
    right.set_title("Next-token agreement")
    for x, value in enumerate(agreement):
        right.annotate(f"{value:.3f}", (x, value), ha="center", va="bottom", fontsize=8)
    for axis in (left, right):
        axis.tick_params(axis="x", labelsize=8)
    figure.suptitle(f"{result.model}: {result.dataset['tokens']} tokens, simulated quantization on the CPU", fontsize=10)
    figure.tight_layout()
    write_figure_atomic(figure, path, dpi=110)

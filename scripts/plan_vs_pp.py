"""The planner against TensorRT-LLM's published runs with pipeline parallelism (pipeline/data/trtllm_published_throughput_pp.tsv:
the RTX PRO 6000 tables of the 1.0 and 1.2-dev pages), none of which any fit sees: each row predicted with the PyTorch
backend's shipped constants and the stages as planner/stages.py lays them out.

Per table column (model, TP, PP, attention DP), then dense and MoE apart, and the gain from the stages: each row against
the same page's row of the same model, TP (or DEP) and ISL/OSL with one stage (pipeline/data/trtllm_published_throughput_more_gpus.tsv,
trtllm_published_throughput_dep.tsv), predicted over published, which takes out the error both share (the GPU's, the
model's) and leaves the stages' own. scripts/plan_vs_published.py
calls it; run alone it prints the same lines. AIConfigurator's recorded estimates of the same rows (and of the one-stage
rows, for its gain) stand beside ours.
"""

from __future__ import annotations

import sys
from typing import Any

from pipeline import planner as P
from plan_vs_aiconfigurator import annotate, side_by_side
from plan_vs_more_models import summary_beside_aiconfigurator as _summary, summary_text


def _gain_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose page published the same model, TP (or DEP) and ISL/OSL with one stage on this GPU: the error of the
    predicted gain (the stages' figure over the one-stage figure) against the published gain, as error_pct."""
    single = [r for r in P.compare_published(None, [*P.more_gpu_rows(), *P.dep_rows()]) if r["gpu"] == "rtx-pro-6000"]
    annotate(single)
    one_stage = {(r["trtllm_version"], r["model"], r["tp"], bool(r.get("attention_dp")), r["isl"], r["osl"]): r for r in single}
    out = []
    for row in rows:
        base = one_stage.get((row["trtllm_version"], row["model"], row["tp"], bool(row.get("attention_dp")), row["isl"], row["osl"]))
        if base is None:
            continue
        predicted = row["predicted_tokens_per_s"] / base["predicted_tokens_per_s"]
        published = row["published_tokens_per_s"] / base["published_tokens_per_s"]
        gain = {**row, "predicted_gain": round(predicted, 3), "published_gain": round(published, 3),
                "error_pct": round(100 * (predicted / published - 1), 2)}
        gain.pop("aiconfigurator_error_pct", None)
        if "aiconfigurator_tokens_per_s" in row and "aiconfigurator_tokens_per_s" in base:
            theirs = row["aiconfigurator_tokens_per_s"] / base["aiconfigurator_tokens_per_s"]
            gain["aiconfigurator_error_pct"] = round(100 * (theirs / published - 1), 2)
        out.append(gain)
    return out


def pp_report() -> dict[str, Any]:
    rows = P.compare_published(None, P.pp_rows())
    aic = annotate(rows)
    groups = []
    for version, model, tp, pp, dep in sorted({(r["trtllm_version"], r["model"], r["tp"], r["pp"], bool(r.get("attention_dp")))
                                                 for r in rows}):
        group = [r for r in rows if (r["trtllm_version"], r["model"], r["tp"], r["pp"], bool(r.get("attention_dp")))
                 == (version, model, tp, pp, dep)]
        groups.append({"trtllm_version": version, "model": model, "tp": tp, "pp": pp, "attention_dp": dep,
                       "summary": _summary(group), "rows": group})
    gain = _gain_rows(rows)
    return {"table": "pipeline/data/trtllm_published_throughput_pp.tsv", "summary": _summary(rows),
            "dense": _summary([r for r in rows if not r.get("attention_dp")]),
            "moe": _summary([r for r in rows if r.get("attention_dp")]),
            "gain_over_one_stage": {"summary": _summary(gain), "rows": gain}, "groups": groups,
            "aiconfigurator": {**aic, "per_gpu": side_by_side(rows)}}


def pp_lines(report: dict[str, Any]) -> list[str]:
    prefix = "pipeline parallelism (RTX PRO 6000, never fitted):"

    lines = [f"{prefix} {g['trtllm_version']:7s} {g['model']:16s} {'DEP' if g['attention_dp'] else 'TP'}{g['tp']},PP{g['pp']}: "
             + summary_text(g["summary"]) for g in report["groups"]]
    lines += [f"{prefix} dense models: {summary_text(report['dense'])}", f"{prefix} MoE models (DEP): {summary_text(report['moe'])}",
              f"{prefix} all: {summary_text(report['summary'])}",
              f"{prefix} the gain over one stage (same page, model, TP or DEP, ISL/OSL): {summary_text(report['gain_over_one_stage']['summary'])}"]
    return lines


def pp_panel(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """plan_vs_published.plot's panel: one column per published table column."""
    return {"pipeline parallel (never fitted)": [
        {"value": f"{g['model']} {'DEP' if g['attention_dp'] else 'TP'}{g['tp']},PP{g['pp']} ({g['trtllm_version']})",
         **g["summary"], "comparison": g["rows"]} for g in report["groups"]]}


def main() -> int:
    from pipeline.core.output import OUT

    for line in pp_lines(pp_report()):
        OUT.stdout.print(line, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

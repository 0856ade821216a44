"""The planner against TensorRT-LLM's published DeepSeek R1 runs (pipeline/data/trtllm_published_throughput_mla.tsv: the
1.2-dev page's DEP columns), which no fit sees: the check of the latent-attention model (planner/latent.py).

Two figures per row: ours against the published one, and ours against AIConfigurator's estimate of the same row at the
same batch (pipeline/data/aiconfigurator_predictions.tsv; rows where its own memory check made it halve the batch are left
out of that comparison). AIConfigurator times DeepSeek's MLA and MoE kernels on silicon, so the second figure checks the
planner's latent-attention arithmetic; the first adds what neither estimator knows about the published runs (the batch
trtllm-bench gave them above all). scripts/plan_vs_published.py calls it; run alone it prints the same lines.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import planner as P  # noqa: E402
from plan_vs_aiconfigurator import annotate, same_batch  # noqa: E402
from plan_vs_more_models import signed_summary, summary_beside_aiconfigurator, summary_text  # noqa: E402


def mla_report() -> dict[str, Any]:
    rows = P.compare_published(None, P.mla_rows())
    annotate(rows)
    groups = []
    for gpu, tp in sorted({(r["gpu"], r["tp"]) for r in rows}):
        group = [r for r in rows if (r["gpu"], r["tp"]) == (gpu, tp)]
        groups.append({"gpu": gpu, "tp": tp, "published": summary_beside_aiconfigurator(group), "rows": group})
    beside = same_batch(rows)
    return {"table": "pipeline/data/trtllm_published_throughput_mla.tsv", "published": signed_summary(rows),
            "against_aiconfigurator": {**signed_summary(beside), "compared": beside}, "groups": groups}


def mla_lines(report: dict[str, Any]) -> list[str]:
    prefix = "latent attention (DeepSeek R1 0528, DEP, never fitted):"
    lines = [f"{prefix} {g['gpu']:6s} DEP{g['tp']}: against the published figures {summary_text(g['published'])}"
             for g in report["groups"]]
    lines.append(f"{prefix} all: against the published figures {summary_text(report['published'])}")
    lines.append(f"{prefix} against AIConfigurator at the same batch: {summary_text(report['against_aiconfigurator'])}")
    return lines


def mla_panel(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """plan_vs_published.plot's panel: one column per published table column."""
    return {"latent attention, DeepSeek R1 (never fitted)": [
        {"value": f"{g['gpu']} DEP{g['tp']}", **g["published"], "comparison": g["rows"]} for g in report["groups"]]}


if __name__ == "__main__":
    print("\n".join(mla_lines(mla_report())))

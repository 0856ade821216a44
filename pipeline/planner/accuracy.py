"""The accuracy cost of a precision, where `pipeline evaluate` has measured it for this model.

evaluate writes `<build>/<model>/reports/evaluate-<id>/evaluate.json` (pipeline/evaluate/cache.py): the
baseline and one row per format with its perplexity change (`delta`) and top-1 agreement with the
baseline. The planner reads those files as data (it sits below evaluate and does not import it); the
newest report whose `hf_dir` is the planned model folder wins.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.core.paths import stage_dir

REPORT_GLOB = "evaluate-*/evaluate.json"


def _report_roots(model_path: Path, model_name: str) -> list[Path]:
    folder = model_path.parent if model_path.name == "config.json" else model_path
    roots = [folder.parent / "reports"] if folder.name == "hf" else []
    roots.append(stage_dir(model_name, "reports"))
    return [r for r in dict.fromkeys(roots) if r.is_dir()]


def _same_folder(recorded: Any, folder: Path) -> bool:
    try:
        return bool(recorded) and Path(recorded).resolve() == folder.resolve()
    except OSError:
        return False


def accuracy_costs(model_path: Path, model_name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(quant, kv_cache) -> {perplexity_delta, top1_agreement, report} from the newest evaluate report of
    this model folder; empty when evaluate has not run for it."""
    folder = Path(model_path)
    folder = folder.parent if folder.name == "config.json" else folder
    reports = [p for root in _report_roots(Path(model_path), model_name) for p in root.glob(REPORT_GLOB)]
    for report in sorted(reports, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            data = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not _same_folder(data.get("hf_dir"), folder):
            continue
        costs = {}
        for row in [data.get("baseline") or {}, *(data.get("formats") or [])]:
            if "quant" in row and "delta" in row:
                costs[(row["quant"], row.get("kv_cache") or "auto")] = {
                    "perplexity_delta": row["delta"], "top1_agreement": row.get("top1_agreement"), "report": str(report)}
        return costs
    return {}

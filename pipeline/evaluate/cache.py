"""What decides an evaluation (its inputs hash) and the report folder that stores it: the same
inputs again reuse the stored figures; a new measurement is written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.core.artifacts import (
    MANIFEST_NAME,
    ArtifactOrigin,
    atomic_dir,
    build_manifest,
    reusable,
    read_manifest,
    sha256_file,
    sha256_json,
    tool_versions,
    write_json_atomic,
)
from pipeline.evaluate.report import REPORT_STEM, write_reports
from pipeline.evaluate.spec import EvaluateResult, EvaluateSpec
from pipeline.core.paths import stage_dir

EVAL_VERSION = 1  # bump when the scoring changes, so cached reports are recomputed
PACKAGES = ("torch", "transformers", "nvidia-modelopt")


def checkpoint_fingerprint(hf_dir: Path) -> str:
    """The checkpoint's file inventory from its manifest, else names, sizes and mtimes."""
    manifest = read_manifest(hf_dir)
    if manifest and manifest.get("files"):
        return sha256_json(manifest["files"])
    files = sorted(p for p in hf_dir.iterdir() if p.is_file() and p.name != MANIFEST_NAME)
    return sha256_json({p.name: [p.stat().st_size, int(p.stat().st_mtime)] for p in files})


def evaluation_inputs(spec: EvaluateSpec, hf_dir: Path, data_path: Path, calib: list[str]) -> dict[str, Any]:
    """Everything that changes the figures (not max_delta: the gate is re-applied to stored figures)."""
    return {
        "eval_version": EVAL_VERSION,
        "checkpoint": checkpoint_fingerprint(hf_dir),
        "data": {"name": data_path.name, "sha256": sha256_file(data_path), "max_texts": spec.max_texts},
        "variants": [v.name for v in spec.variants],
        "calibration": sha256_json(calib),
        "calib_max_len": spec.calib_max_len,
        "max_len": spec.max_len,
        "versions": {k: v for k, v in tool_versions(*PACKAGES).items() if k != "trtllm-pipeline"},
    }


def report_dir_for(spec: EvaluateSpec, model_name: str, inputs_hash: str) -> Path:
    """`<reports>/evaluate-<id>/`: under spec.out, else build/<model>/reports."""
    root = Path(spec.out).expanduser().resolve() if spec.out else stage_dir(model_name, "reports")
    return root / f"{REPORT_STEM}-{inputs_hash[:10]}"


def cached_result(report_dir: Path, inputs_hash: str) -> EvaluateResult | None:
    """The stored result of these inputs (marked cached), or None when there is none intact."""
    if not reusable(report_dir, inputs_hash):
        return None
    stored = json.loads((report_dir / f"{REPORT_STEM}.json").read_text(encoding="utf-8"))
    return EvaluateResult.model_validate({**stored, "cached": True})


def store_result(result: EvaluateResult, inputs: dict[str, Any], started: float) -> EvaluateResult:
    """Write the reports, the result's JSON and a manifest into result.report_dir, atomically;
    returns the result with the report paths filled in."""
    report_dir = result.report_dir
    with atomic_dir(report_dir) as tmp:
        reports = write_reports(result, tmp)
        result = result.model_copy(update={"reports": {k: report_dir / p.name for k, p in reports.items()}})
        write_json_atomic(tmp / f"{REPORT_STEM}.json", result.model_dump(mode="json"))
        manifest = build_manifest(
            ArtifactOrigin("evaluate", inputs, result.inputs_hash, PACKAGES),
            tmp,
            started,
            extra={"model": result.model, "hf_dir": str(result.hf_dir)},
        )
        write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return result


__all__ = ["EVAL_VERSION", "cached_result", "checkpoint_fingerprint", "evaluation_inputs", "report_dir_for", "store_result"]

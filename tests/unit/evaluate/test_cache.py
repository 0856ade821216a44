"""pipeline.evaluate.cache: what decides an evaluation, and the stored report folder."""

from __future__ import annotations

import json
import time
from pathlib import Path

from evaluate_fixtures import sample_result
from pipeline.core.artifacts import read_manifest
from pipeline.evaluate.cache import cached_result, checkpoint_fingerprint, evaluation_inputs, report_dir_for, store_result
from pipeline.evaluate.scoring import EVAL_DATA
from pipeline.evaluate.spec import EvaluateSpec


def test_checkpoint_fingerprint_follows_the_files(tmp_path: Path):
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    first = checkpoint_fingerprint(tmp_path)
    assert checkpoint_fingerprint(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    assert checkpoint_fingerprint(tmp_path) != first
    # a folder with a manifest is fingerprinted by its file inventory
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {"a": {"sha256": "0" * 64, "size": 1}}}), encoding="utf-8")
    with_manifest = checkpoint_fingerprint(tmp_path)
    (tmp_path / "other.txt").write_text("not in the inventory", encoding="utf-8")
    assert checkpoint_fingerprint(tmp_path) == with_manifest


def test_inputs_name_what_changes_the_figures_but_not_the_gate(tmp_path: Path):
    spec = EvaluateSpec.from_formats("m", ["fp8", "int4_awq"], "fp8")
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    inputs = evaluation_inputs(spec, tmp_path, EVAL_DATA, ["a", "b"])
    assert inputs["variants"] == ["fp8+kv_fp8", "int4_awq+kv_fp8"] and inputs["data"]["name"] == "eval.jsonl"
    assert inputs["max_len"] == 512 and "torch" in inputs["versions"]
    assert evaluation_inputs(spec.model_copy(update={"max_delta": 0.5}), tmp_path, EVAL_DATA, ["a", "b"]) == inputs
    assert evaluation_inputs(spec, tmp_path, EVAL_DATA, ["a"]) != inputs


def test_report_dir_under_out_or_the_models_reports(tmp_path: Path, build_root: Path):
    spec = EvaluateSpec.from_formats("m", ["fp8"])
    assert report_dir_for(spec, "my-model", "abcdef0123456789") == build_root / "my-model" / "reports" / "evaluate-abcdef0123"
    elsewhere = spec.model_copy(update={"out": tmp_path / "r"})
    assert report_dir_for(elsewhere, "my-model", "abcdef0123456789") == (tmp_path / "r" / "evaluate-abcdef0123").resolve()


def test_stored_result_comes_back_cached_only_for_the_same_inputs(tmp_path: Path):
    report_dir = tmp_path / "evaluate-x"
    assert cached_result(report_dir, "h" * 64) is None
    stored = store_result(sample_result(report_dir), {"x": 1}, time.time())
    assert set(stored.reports) == {"json", "csv", "markdown", "plot"}
    assert all(path.parent == report_dir and path.is_file() for path in stored.reports.values())
    assert read_manifest(report_dir)["stage"] == "evaluate" and read_manifest(report_dir)["model"] == "m"
    again = cached_result(report_dir, "h" * 64)
    assert again is not None and again.cached and again.model_copy(update={"cached": False}) == stored
    assert cached_result(report_dir, "other") is None

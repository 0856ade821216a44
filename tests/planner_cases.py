"""Helpers of the planner and placement tests (test_planner_*.py, test_placement.py): Llama-3.1-8B's config.json
in tests/fixtures/ (its ModelSpec is the `llama8b` fixture of tests/unit/conftest.py) and config.json files of
other shapes; for the checks against published figures, the scripts/ modules and AIConfigurator's figures beside ours."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA_8B = Path(__file__).resolve().parent / "fixtures" / "llama-3.1-8b"


def write_config(tmp_path: Path, **shapes) -> Path:
    """A config.json holding `shapes`, in tmp_path."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shapes), encoding="utf-8")
    return path


def script_module(name: str = "plan_vs_published"):
    """scripts/<name>.py imported as a module (scripts/ put on sys.path first, for the modules it imports by name)."""
    import importlib.util
    import sys

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    sys.path.insert(0, str(scripts))
    spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_beside(entry: dict, theirs: tuple[float, float], ours: tuple[float, float], key: object) -> None:
    """A side_by_side entry (scripts/plan_vs_aiconfigurator.py): AIConfigurator's median / worst |error| and ours (in sample)."""
    import pytest

    assert (entry["aiconfigurator_median_abs_pct_error"], entry["aiconfigurator_max_abs_pct_error"]) == pytest.approx(theirs, abs=0.1), key
    assert (entry["ours_in_sample_median_abs_pct_error"], entry["ours_in_sample_max_abs_pct_error"]) == pytest.approx(ours, abs=0.1), key

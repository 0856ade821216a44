"""Helpers of the planner and placement tests (test_planner_*.py, test_placement.py): Llama-3.1-8B's config.json
in tests/fixtures/ (its ModelSpec is the `llama8b` fixture of tests/unit/conftest.py) and config.json files of
other shapes."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA_8B = Path(__file__).resolve().parent / "fixtures" / "llama-3.1-8b"


def write_config(tmp_path: Path, **shapes) -> Path:
    """A config.json holding `shapes`, in tmp_path."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shapes), encoding="utf-8")
    return path

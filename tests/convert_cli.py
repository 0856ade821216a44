"""`pipeline convert` twice through the CLI: the first run does the work, the second must be a no-op
that touches no file (shared by the trtllm and hf conversion tests)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.artifacts import sha256_file
from pipeline.cli import run


def convert_twice(argv: list[str], build_root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], Path]:
    """Run `argv --force`, then `argv`; assert the second kept the folder byte for byte, in under a
    third of the time. Returns (the first run's JSON result, the checkpoint folder)."""
    started = time.perf_counter()
    assert run([*argv, "--force"]) == 0
    first_s = time.perf_counter() - started
    first = json.loads(capsys.readouterr().out)  # stdout is pure JSON: ModelOpt's prints are captured
    out = Path(first["path"])
    assert first["skipped"] is False
    assert out.parent == build_root / first["model"] / "checkpoints"
    before = {p.name: (p.stat().st_mtime_ns, sha256_file(p)) for p in out.iterdir()}

    started = time.perf_counter()
    assert run(argv) == 0
    again_s = time.perf_counter() - started
    second = json.loads(capsys.readouterr().out)
    assert second["skipped"] is True and second["path"] == first["path"]
    assert {p.name: (p.stat().st_mtime_ns, sha256_file(p)) for p in out.iterdir()} == before
    assert again_s < first_s / 3, (first_s, again_s)
    return first, out

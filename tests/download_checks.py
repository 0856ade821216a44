"""Helpers for the download tests (tests/unit/test_download*.py, test_hf_checkpoint.py): the CLI run
with --json or refused, the manifest checked against the files, a folder's files and mtimes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.artifacts import read_manifest, sha256_file
from pipeline.cli import run


def json_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    code = run([*argv, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else {}), captured.err


def refused(argv: list[str], capsys, *, code: int = 2) -> str:
    assert run(argv) == code
    err = capsys.readouterr().err
    assert "error:" in err and "hint:" in err and "Traceback" not in err
    return err


def mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def repo_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def assert_manifest_matches_files(folder: Path) -> dict:
    manifest = read_manifest(folder)
    assert manifest is not None
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == on_disk
    for name, meta in manifest["files"].items():
        assert meta == {"sha256": sha256_file(folder / name), "size": (folder / name).stat().st_size}
    assert manifest["stage"] == "download" and manifest["duration_s"] >= 0
    assert "python" in manifest["tool_versions"]
    return manifest

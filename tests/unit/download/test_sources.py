"""pipeline.hf.sources: SOURCE strings understood or refused (message, hint and exit code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from download_checks import refused
from pipeline.hf.sources import DEMO_MODEL, parse_source
from pipeline.core.errors import InvalidInputError


def test_refusals_of_the_source(tmp_path: Path, tiny_ckpt: Path, build_root: Path, capsys) -> None:
    assert "Unknown source scheme 's3'" in refused(["download", "s3:bucket/model"], capsys)
    assert "Path not found" in refused(["download", str(tmp_path / "missing")], capsys)
    assert "Path not found" in refused(["download", f"local:{tmp_path / 'missing'}"], capsys)
    assert "write hf:org/name" in refused(["download", "org/name"], capsys)
    assert "Invalid Hugging Face repo id" in refused(["download", "hf:org/../etc"], capsys)
    assert "Invalid Hugging Face repo id" in refused(["download", "hf:justaname"], capsys)
    assert "Two different revisions" in refused(["download", "hf:org/name@a", "--revision", "b"], capsys)
    assert "--revision applies to hf:" in refused(["download", str(tiny_ckpt), "--revision", "main"], capsys)
    assert "--revision does not apply to the demo" in refused(["download", "demo", "--revision", "x"], capsys)

    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a gguf")
    assert "is not a GGUF file" in refused(["download", f"gguf:{not_gguf}"], capsys)
    assert "is not a GGUF file" in refused(["download", str(not_gguf)], capsys)
    assert "is a folder, not a GGUF file" in refused(["download", f"gguf:{tmp_path}"], capsys)
    assert not build_root.exists()


def test_model_names_cannot_escape_build(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        parse_source("hf:Org/My..Model")
    weird = tmp_path / "..Evil Name (v2)!.gguf"
    weird.write_bytes(b"GGUF" + b"\0" * 16)
    parsed = parse_source(f"gguf:{weird}")
    assert parsed.kind == "gguf" and parsed.model == "evil-name-v2"
    assert parse_source("hf:Org/Some_Model.v2").model == "some_model.v2"


def test_sources_parsed(tmp_path: Path, tiny_ckpt: Path) -> None:
    hub = parse_source("hf:Org/Name@v1")
    assert (hub.kind, hub.location, hub.revision, hub.model, hub.display) == ("hf", "Org/Name", "v1", "name", "hf:Org/Name@v1")
    assert parse_source("hf:Org/Name", "main").display == "hf:Org/Name@main"
    local = parse_source(str(tiny_ckpt))
    assert local.kind == "local" and local == parse_source(f"local:{tiny_ckpt}") and local.display == f"local:{tiny_ckpt}"
    assert parse_source("demo").model == DEMO_MODEL and parse_source("demo").display == "demo"
    with pytest.raises(InvalidInputError, match="The source is empty"):
        parse_source("  ")

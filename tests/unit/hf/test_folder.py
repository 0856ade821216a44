"""pipeline.hf.folder: what conversion needs from a checkpoint folder, and the checks `download`
and `convert` both make on one (through `pipeline download`, and directly)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from download_checks import refused
from pipeline.core.errors import InvalidInputError
from pipeline.hf.folder import ALLOW_PATTERNS, check_checkpoint_folder, selected_files


def test_refusals_of_the_folder(tmp_path: Path, tiny_ckpt: Path, build_root: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no config.json" in refused(["download", str(empty)], capsys)
    (empty / "config.json").write_text("{}")
    (empty / "pytorch_model.bin").write_bytes(b"x")
    err = refused(["download", f"local:{empty}"], capsys)
    assert "has no *.safetensors weights (found pytorch_model.bin)" in err

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_bytes((tiny_ckpt / "config.json").read_bytes())
    data = (tiny_ckpt / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "is truncated" in refused(["download", str(truncated)], capsys)

    assert not build_root.exists()


def test_sharded_checkpoint_missing_a_shard_is_refused(tmp_path: Path, tiny_ckpt: Path) -> None:
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_bytes((tiny_ckpt / "config.json").read_bytes())
    (folder / "model-00001-of-00002.safetensors").write_bytes((tiny_ckpt / "model.safetensors").read_bytes())
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InvalidInputError, match="misses weight shards named in its index: model-00002-of-00002"):
        check_checkpoint_folder(folder)
    check_checkpoint_folder(tiny_ckpt)  # a complete folder passes


def test_selected_files_are_what_conversion_needs(tiny_ckpt: Path) -> None:
    names = [p.name for p in selected_files(tiny_ckpt)]
    assert "model.safetensors" in names and "config.json" in names and names == sorted(names)
    assert not {"README.md", "pytorch_model.bin"} & set(names)


def test_allow_patterns_cover_conversion_inputs() -> None:
    for name in ("config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
                 "tokenizer.model", "chat_template.jinja", "generation_config.json", "special_tokens_map.json"):
        assert any(fnmatch.fnmatch(name, p) for p in ALLOW_PATTERNS), name
    for name in ("pytorch_model.bin", "README.md", "model.gguf", "onnx.onnx", "consolidated.pth"):
        assert not any(fnmatch.fnmatch(name, p) for p in ALLOW_PATTERNS), name

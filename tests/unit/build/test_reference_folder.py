"""pipeline.build.reference_folder: the engine folder the reference runtime serves, laid out like trtllm-build's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.build.reference_folder import REFERENCE_RUNTIME, write_reference_engine_dir


def _hf(root: Path) -> Path:
    hf = root / "hf"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    (hf / "model.safetensors").write_bytes(b"\0" * 8)
    (hf / "tokenizer.json").write_text("{}")
    (hf / "manifest.json").write_text("{}")
    return hf


def test_the_folder_has_the_config_render_reads_the_weights_and_the_tokenizer(tmp_path: Path) -> None:
    hf = _hf(tmp_path)
    engine = write_reference_engine_dir(hf, tmp_path / "engines" / "ref", {"max_batch_size": 2},
                                        simulated_quant=("fp8", "fp8"))
    config = json.loads((engine / "config.json").read_text())
    assert config["runtime"] == REFERENCE_RUNTIME and config["build_config"]["max_batch_size"] == 2
    assert config["pretrained_config"]["architecture"] == "LlamaForCausalLM"
    assert (engine / "model" / "model.safetensors").is_file() and (engine / "tokenizer" / "tokenizer.json").is_file()
    assert not (engine / "model" / "manifest.json").exists()  # the download's manifest is not a weight file


def test_a_folder_without_weights_or_tokenizer_is_refused(tmp_path: Path) -> None:
    hf = _hf(tmp_path)
    (hf / "tokenizer.json").unlink()
    with pytest.raises(InvalidInputError, match="no tokenizer"):
        write_reference_engine_dir(hf, tmp_path / "a")
    (hf / "model.safetensors").unlink()
    with pytest.raises(InvalidInputError, match="no weights"):
        write_reference_engine_dir(hf, tmp_path / "b")
    with pytest.raises(InvalidInputError, match="max_input_len"):
        write_reference_engine_dir(_hf(tmp_path / "c"), tmp_path / "d", {"max_input_len": 64, "max_seq_len": 64})

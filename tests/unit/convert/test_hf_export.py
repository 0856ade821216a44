"""pipeline.convert.hf_export without a model: what `finish` does to an exported folder (config.json for
transformers 4.57.1, the source's tokenizer and generation config) and how hf_quant_config.json is
checked against the PyTorch backend's facts (pipeline/data/trtllm_pytorch_checkpoint.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.convert.hf_export import check_quant_config, expected_quantization, facts, finish, quant_config_problems
from pipeline.core.quant import kv_cache_format, quant_format

FP8 = {"producer": {"name": "modelopt", "version": "0.47.0"},
       "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
LLAMA3 = {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def exported_folder(tmp_path: Path) -> Path:
    """What ModelOpt's export leaves under transformers 5: rope_parameters only, a derived generation config."""
    out = tmp_path / "out"
    write(out / "config.json", {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "dtype": "float16",
                                "rope_parameters": LLAMA3, "hidden_size": 64, "num_attention_heads": 4})
    write(out / "generation_config.json", {"_from_model_config": True, "bos_token_id": 1})
    (out / "model.safetensors").write_bytes(b"")
    return out


def source_folder(tmp_path: Path, *, generation: bool) -> Path:
    source = tmp_path / "source"
    write(source / "tokenizer.json", {"model": {}})
    write(source / "tokenizer_config.json", {"tokenizer_class": "TokenizersBackend", "eos_token": "<|im_end|>"})
    (source / "chat_template.jinja").write_text("{{ messages }}", encoding="utf-8")
    if generation:
        write(source / "generation_config.json", {"bos_token_id": 1, "temperature": 0.2})
    return source


def test_finish_makes_the_folder_read_the_same_under_4_57(tmp_path: Path) -> None:
    out = exported_folder(tmp_path)
    quantization, changes = finish(out, source_folder(tmp_path, generation=True), quant_format("fp16"), kv_cache_format(None),
                                   "float16", None)
    assert quantization is None
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["rope_theta"] == 500000.0 and config["rope_parameters"] == LLAMA3
    assert config["rope_scaling"] == {k: v for k, v in LLAMA3.items() if k != "rope_theta"}
    tokenizer = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tokenizer["tokenizer_class"] == "PreTrainedTokenizerFast" and (out / "chat_template.jinja").is_file()
    assert json.loads((out / "generation_config.json").read_text(encoding="utf-8"))["temperature"] == 0.2
    assert any("rope_theta 500000" in line for line in changes) and any("TokenizersBackend" in line for line in changes)


def test_finish_drops_a_derived_generation_config_and_needs_a_tokenizer(tmp_path: Path) -> None:
    out = exported_folder(tmp_path)
    _, changes = finish(out, source_folder(tmp_path, generation=False), quant_format("fp16"), kv_cache_format(None),
                        "float16", None)
    assert not (out / "generation_config.json").exists() and "generation_config.json: removed (the source has none)" in changes

    empty = tmp_path / "no-tokenizer"
    empty.mkdir()
    with pytest.raises(InvalidInputError, match="has no tokenizer files"):
        finish(exported_folder(tmp_path / "again"), empty, quant_format("fp16"), kv_cache_format(None), "float16", None)


def test_expected_quantization_follows_the_facts_table() -> None:
    assert expected_quantization(quant_format("fp16"), kv_cache_format(None), None) is None
    assert expected_quantization(quant_format("bf16"), kv_cache_format("fp8"), None) == {
        "quant_algo": None, "kv_cache_quant_algo": "FP8", "group_size": None}
    assert expected_quantization(quant_format("int4_awq"), kv_cache_format(None), 64)["group_size"] == 64
    assert expected_quantization(quant_format("nvfp4"), kv_cache_format(None), None)["group_size"] == 16
    assert facts()["sources"]["model_config"]["commit"] == "1a0dc5f70054f66d892df6a964996fc5ead6f81e"


@pytest.mark.parametrize("change, problem", [
    ({"quant_algo": "W8A8_SQ_PER_CHANNEL"}, 'quant_algo is "W8A8_SQ_PER_CHANNEL", expected "FP8"'),
    ({"kv_cache_quant_algo": None}, 'kv_cache_quant_algo is null, expected "FP8"'),
    ({"group_size": "128"}, 'group_size is "128", not int|null'),
    ({"exclude_modules": "lm_head"}, 'exclude_modules is "lm_head", not list[str]|null'),
])
def test_quant_config_problems_name_the_field(change, problem) -> None:
    expected = {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "group_size": None}
    assert quant_config_problems(FP8, expected)[0] == []
    broken = {**FP8, "quantization": {**FP8["quantization"], **change}}
    assert problem in quant_config_problems(broken, expected)[0]
    assert quant_config_problems({"producer": {}}, expected)[0] == [
        "no quantization object (load_modelopt_quant_config indexes it)"]


def test_check_quant_config_refuses_a_file_that_should_not_or_should_be_there(tmp_path: Path) -> None:
    write(tmp_path / "plain" / "hf_quant_config.json", FP8)
    with pytest.raises(StageFailedError, match="wrote hf_quant_config.json for unquantized fp16"):
        check_quant_config(tmp_path / "plain", quant_format("fp16"), kv_cache_format(None), None)
    (tmp_path / "none").mkdir()
    with pytest.raises(StageFailedError, match="wrote no hf_quant_config.json for fp8"):
        check_quant_config(tmp_path / "none", quant_format("fp8"), kv_cache_format("fp8"), None)
    write(tmp_path / "fp8" / "hf_quant_config.json", FP8)
    assert check_quant_config(tmp_path / "fp8", quant_format("fp8"), kv_cache_format("fp8"), None)["quant_algo"] == "FP8"
    with pytest.raises(StageFailedError, match='kv_cache_quant_algo is "FP8", expected null'):
        check_quant_config(tmp_path / "fp8", quant_format("fp8"), kv_cache_format(None), None)


def test_the_formats_convert_takes_are_the_ones_the_facts_describe() -> None:
    from pipeline.core.deployable import HF_KV_CACHE_FORMATS, HF_QUANT_FORMATS
    from pipeline.core.quant import QUANT_FORMATS

    passed_through = {name for name in HF_QUANT_FORMATS if not QUANT_FORMATS[name].is_quantized}
    assert passed_through == {"fp16", "bf16"}
    assert set(facts()["formats"]) == set(HF_QUANT_FORMATS) - passed_through
    assert set(facts()["kv_cache"]) == set(HF_KV_CACHE_FORMATS) - {"auto"}
    assert {name: QUANT_FORMATS[name].quant_algo for name in facts()["formats"]} == {
        name: fmt["quant_algo"] for name, fmt in facts()["formats"].items()}

"""Rendering an engine built with speculative decoding (pipeline/render/speculative.py): a draft-target build
gets NVIDIA's tensorrt_llm_draft model (the draft engine carried in the bundle) and the BLS's
tensorrt_llm_draft_model_name; a lookahead engine gets decoding_mode and the three lookahead_* parameters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.render import RenderSpec, render
from pipeline.render.model_repo import parse_model_config
from render_cases import fake_hf_dir, reference_engine_dir, trtllm_engine_dir
from pipeline.build.reference_folder import write_reference_engine_dir


def _record(engine: Path, record: dict, *, in_config: bool) -> None:
    if in_config:
        config = json.loads((engine / "config.json").read_text())
        config["build_config"]["speculative"] = record
        (engine / "config.json").write_text(json.dumps(config))
    (engine / "manifest.json").write_text(json.dumps({"speculative": record}))


def _param(config, key: str) -> str:
    return config.parameters[key].string_value


def test_draft_target_renders_the_draft_model_inside_the_bundle(tmp_path: Path) -> None:
    engine = reference_engine_dir(tmp_path)
    write_reference_engine_dir(fake_hf_dir(tmp_path / "d"), engine / "draft",
                               {"max_batch_size": 2, "max_input_len": 64, "max_seq_len": 128})
    _record(engine, {"method": "draft-target", "max_draft_len": 4, "draft_dir": "draft"}, in_config=True)
    root = Path("/models/demo")
    result = render(RenderSpec(engine=engine, out=tmp_path / "repo", model_root=root))
    assert "tensorrt_llm_draft" in result.models
    draft = parse_model_config(result.repo / "tensorrt_llm_draft" / "config.pbtxt")
    assert draft.name == "tensorrt_llm_draft" and draft.backend == "python" and draft.max_batch_size == 2
    assert _param(draft, "gpt_model_path") == str(root / "tensorrt_llm" / "1" / "draft")  # for the bundle's root
    assert (result.repo / "tensorrt_llm" / "1" / "draft" / "model" / "config.json").is_file()  # draft/ travels
    assert (result.repo / "tensorrt_llm_draft" / "1" / "model.py").is_file()
    bls = parse_model_config(result.repo / "tensorrt_llm_bls" / "config.pbtxt")
    assert _param(bls, "tensorrt_llm_draft_model_name") == "tensorrt_llm_draft"
    target = parse_model_config(result.repo / "tensorrt_llm" / "config.pbtxt")
    assert target.name == "tensorrt_llm" and "decoding_mode" not in target.parameters


def test_without_speculation_the_bls_names_no_draft(tmp_path: Path) -> None:
    result = render(RenderSpec(engine=reference_engine_dir(tmp_path), out=tmp_path / "repo"))
    assert "tensorrt_llm_draft" not in result.models and not (result.repo / "tensorrt_llm_draft").exists()
    bls = parse_model_config(result.repo / "tensorrt_llm_bls" / "config.pbtxt")
    assert _param(bls, "tensorrt_llm_draft_model_name") == ""  # NVIDIA's BLS: no draft model, no speculation


def test_lookahead_engine_gets_decoding_mode_and_its_parameters(tmp_path: Path) -> None:
    engine = trtllm_engine_dir(tmp_path)
    _record(engine, {"method": "lookahead", "max_draft_len": 83, "lookahead": [7, 7, 7]}, in_config=False)
    repo = render(RenderSpec(engine=engine, out=tmp_path / "repo")).repo
    config = parse_model_config(repo / "tensorrt_llm" / "config.pbtxt")
    assert _param(config, "decoding_mode") == "lookahead"
    assert [_param(config, f"lookahead_{k}") for k in ("window_size", "ngram_size", "verification_set_size")] == ["7"] * 3


def test_a_draft_target_record_without_its_draft_is_refused(tmp_path: Path) -> None:
    engine = reference_engine_dir(tmp_path)
    _record(engine, {"method": "draft-target", "max_draft_len": 4, "draft_dir": "draft"}, in_config=True)
    with pytest.raises(InvalidInputError, match="draft"):
        render(RenderSpec(engine=engine, out=tmp_path / "repo"))
    _record(engine, {"method": "draft-target", "max_draft_len": 4, "draft_dir": "../elsewhere"}, in_config=True)
    with pytest.raises(InvalidInputError, match="inside"):
        render(RenderSpec(engine=engine, out=tmp_path / "repo2"))

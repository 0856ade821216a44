"""render_checks: the checks of a rendered repository catch what NVIDIA's runtime would reject (a tensor
off the pinned release's contract, a bad ensemble map, leftover template text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.render.model_repo import parse_model_config
from pipeline.render import RenderSpec, render
from pipeline.render.checks import check_repository, contract_problems, ensemble_problems

from render_cases import configs as _configs, reference_engine_dir, trtllm_engine_dir


def test_contract_matches_the_reference_tables(tmp_path: Path, reference_dir: Path, reference_tsv) -> None:
    rows = reference_tsv("triton_trtllm_model_io.tsv")
    for engine in (reference_engine_dir(tmp_path), trtllm_engine_dir(tmp_path)):
        repo = render(RenderSpec(engine=engine, out=tmp_path / engine.name)).repo
        configs = _configs(repo)
        assert contract_problems(configs["tensorrt_llm"], reference_dir) == []
        # the client-facing models keep every tensor name NVIDIA's clients send and read
        for model in ("ensemble", "tensorrt_llm_bls", "postprocessing"):
            for direction, tensors in (("input", configs[model].input), ("output", configs[model].output)):
                expected = {r["name"] for r in rows if r["model"] == model and r["direction"] == direction}
                assert {t.name for t in tensors} == expected, (model, direction)


def test_contract_check_catches_a_renamed_tensor(tmp_path: Path, reference_dir: Path) -> None:
    repo = render(RenderSpec(engine=reference_engine_dir(tmp_path), out=tmp_path / "repo")).repo
    config = parse_model_config(repo / "tensorrt_llm" / "config.pbtxt")
    config.input[0].name = "input_idz"
    config.parameters["not_a_parameter"].string_value = "1"
    problems = contract_problems(config, reference_dir)
    assert any("'input_ids' of the reference contract is missing" in p for p in problems)
    assert any("'not_a_parameter'" in p for p in problems)


def test_ensemble_check_catches_a_bad_map(tmp_path: Path) -> None:
    repo = render(RenderSpec(engine=reference_engine_dir(tmp_path), out=tmp_path / "repo")).repo
    configs = _configs(repo)
    assert ensemble_problems(configs) == []
    step = configs["ensemble"].ensemble_scheduling.step[1]
    step.input_map["no_such_input"] = "_INPUT_ID"
    step.input_map["temperature"] = "nobody_makes_this"
    problems = ensemble_problems(configs)
    assert any("'no_such_input' is not an input" in p for p in problems)
    assert any("'nobody_makes_this'" in p for p in problems)


def test_leftover_placeholder_fails_the_check(tmp_path: Path) -> None:
    repo = render(RenderSpec(engine=reference_engine_dir(tmp_path), out=tmp_path / "repo")).repo
    config = repo / "postprocessing" / "config.pbtxt"
    config.write_text(config.read_text() + '\nparameters: { key: "x" value: { string_value: "${x}" } }\n')
    with pytest.raises(InvalidInputError, match="unrendered template text"):
        check_repository(repo)

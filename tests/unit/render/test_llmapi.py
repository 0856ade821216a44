"""render of a PyTorch-backend deployable: NVIDIA's LLM-API layout, checked, relocatable, bad input refused."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from llmapi_helpers import make_deployable  # noqa: E402

from pipeline.render.bundle import path_problems  # noqa: E402
from pipeline.core.errors import InvalidInputError  # noqa: E402
from pipeline.render.llmapi import check_llmapi_repository  # noqa: E402
from pipeline.render import RenderSpec, render  # noqa: E402


def test_render_writes_the_llmapi_layout(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build")
    result = render(RenderSpec(engine=deployable))
    repo = tmp_path / "build" / "smollm2-demo" / "triton" / "pt-test"
    assert result.repo == repo and result.runtime == "reference" and result.models == ["tensorrt_llm"]
    assert sorted(p.name for p in repo.iterdir()) == ["manifest.json", "tensorrt_llm"]
    version = repo / "tensorrt_llm" / "1"
    assert {"model.py", "model.yaml", "model", "llm_api_options.yaml", "manifest.json"} <= {p.name for p in version.iterdir()}
    model_yaml = yaml.safe_load((version / "model.yaml").read_text())
    assert model_yaml["backend"] == "pytorch"
    assert model_yaml["model"] == str(version / "model")
    assert model_yaml["max_batch_size"] == 4 and model_yaml["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9
    assert model_yaml["triton_config"] == {"max_batch_size": 0, "decoupled": True, "cancellation_check_period_ms": 100,
                                           "runtime": "reference", "simulated": None}
    assert (version / "model" / "config.json").samefile(deployable / "model" / "config.json")  # hard links
    manifest = json.loads((repo / "manifest.json").read_text())
    assert manifest["layout"] == "llmapi" and manifest["bundle"]["model_root"] == str(repo)
    assert render(RenderSpec(engine=deployable)).reused


def test_gpu_deployable_renders_the_llmapi_runtime_and_no_decoupled(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build", gpu="h100-sxm")
    result = render(RenderSpec(engine=deployable, decoupled=False, out=tmp_path / "repo"))
    triton = yaml.safe_load((result.repo / "tensorrt_llm" / "1" / "model.yaml").read_text())["triton_config"]
    assert result.runtime == "llmapi" and triton["runtime"] == "llmapi" and triton["decoupled"] is False


def test_simulated_precision_reaches_the_reference_runtime(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build", simulated={"quant": "fp8", "kv_cache": "fp8"})
    result = render(RenderSpec(engine=deployable))
    triton = yaml.safe_load((result.repo / "tensorrt_llm" / "1" / "model.yaml").read_text())["triton_config"]
    assert triton["simulated"] == {"quant": "fp8", "kv_cache": "fp8"}


def test_model_root_relocates_the_bundle(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build")
    result = render(RenderSpec(engine=deployable, out=tmp_path / "out", model_root=Path("/models")))
    model_yaml = yaml.safe_load((result.repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert model_yaml["model"] == "/models/tensorrt_llm/1/model"
    assert path_problems(result.repo, Path("/models")) == []
    moved = tmp_path / "elsewhere"
    shutil.copytree(result.repo, moved)
    assert path_problems(moved, Path("/models")) == []  # every path is under the root, not under where it was written


def test_a_model_yaml_outside_the_root_is_a_path_problem(tmp_path: Path) -> None:
    result = render(RenderSpec(engine=make_deployable(tmp_path / "build"), out=tmp_path / "out"))
    model_yaml = result.repo / "tensorrt_llm" / "1" / "model.yaml"
    model_yaml.write_text(model_yaml.read_text().replace(str(result.repo), "/somewhere/else"))
    problems = path_problems(result.repo, result.repo)
    assert len(problems) == 1 and "outside the bundle root" in problems[0]


@pytest.mark.parametrize("options", [{"batching_strategy": "V1"}, {"logits_dtype": "fp16"}, {"runtime": "tensorrtllm"},
                                     {"instances": 2}])
def test_engine_path_options_are_refused(tmp_path: Path, options: dict) -> None:
    deployable = make_deployable(tmp_path / "build")
    with pytest.raises(InvalidInputError):
        render(RenderSpec(engine=deployable, **options))
    assert not (tmp_path / "build" / "smollm2-demo" / "triton").exists()


def test_an_incomplete_deployable_is_refused(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build")
    (deployable / "manifest.json").unlink()
    with pytest.raises(InvalidInputError, match="not a PyTorch-backend deployable"):
        render(RenderSpec(engine=deployable))


def test_options_that_model_yaml_sets_are_refused(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build", options="model: /elsewhere\nmax_batch_size: 2\n")
    with pytest.raises(InvalidInputError, match="model"):
        render(RenderSpec(engine=deployable))


def test_runtime_llmapi_on_an_engine_folder_is_refused(tmp_path: Path) -> None:
    engine = tmp_path / "build" / "m" / "engines" / "e"
    engine.mkdir(parents=True)
    (engine / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 1}}))
    with pytest.raises(InvalidInputError, match="llmapi"):
        render(RenderSpec(engine=engine, runtime="llmapi"))


def test_a_template_that_drifts_from_the_contract_is_refused(tmp_path: Path) -> None:
    result = render(RenderSpec(engine=make_deployable(tmp_path / "build"), out=tmp_path / "out"))
    config = result.repo / "tensorrt_llm" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "finish_reason"', 'name: "finish"'))
    with pytest.raises(InvalidInputError) as error:
        check_llmapi_repository(result.repo, decoupled=True)
    assert "output 'finish_reason' of the contract is missing" in str(error.value)
    assert "output 'finish' is not in the contract" in str(error.value)

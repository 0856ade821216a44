"""The rendered LLM-API repository speaks NVIDIA's contract: its tensorrt_llm/config.pbtxt, tensor by tensor,
equals the table read from TensorRT-LLM's triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt
(pipeline/data/llmapi/contract.json names the commit), and model.yaml has the keys their model.py reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmapi_helpers import make_deployable  # noqa: E402

from pipeline.render.model_repo import parse_model_config  # noqa: E402
from pipeline.render import RenderSpec, render  # noqa: E402

CONTRACT = Path(__file__).resolve().parents[2] / "pipeline" / "data" / "llmapi" / "contract.json"


def _rendered(tmp_path: Path) -> Path:
    return render(RenderSpec(engine=make_deployable(tmp_path / "build"), out=tmp_path / "repo")).repo


def test_contract_table_names_its_upstream_commits() -> None:
    contract = json.loads(CONTRACT.read_text())
    for name in ("config.pbtxt", "model.yaml", "model.py", "helpers.py"):
        path, commit = contract["source"][name].split("@")
        assert path.startswith("triton_backend/all_models/llmapi/tensorrt_llm/") and len(commit) == 40


def test_rendered_config_equals_the_upstream_table(tmp_path: Path) -> None:
    from tritonclient.grpc import model_config_pb2

    contract = json.loads(CONTRACT.read_text())
    config = parse_model_config(_rendered(tmp_path) / "tensorrt_llm" / "config.pbtxt")
    assert (config.name, config.backend, config.max_batch_size) == ("tensorrt_llm", "python", 0)
    assert not config.HasField("model_transaction_policy")  # upstream: set from model.yaml triton_config
    for direction, tensors in (("inputs", config.input), ("outputs", config.output)):
        rendered = [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims),
                     getattr(t, "optional", False)) for t in tensors]  # ModelOutput has no `optional`
        table = [(t["name"], t["data_type"], t["dims"], t.get("optional", False)) for t in contract[direction]]
        assert rendered == table, direction
    names = {t.name for t in config.input}
    assert {"text_input", "streaming", "sampling_param_max_tokens", "sampling_param_temperature", "stop",
            "return_finish_reason"} <= names
    assert [t.name for t in config.output][:2] == ["text_output", "finish_reason"]


def test_model_yaml_has_what_upstream_model_py_reads(tmp_path: Path) -> None:
    model_yaml = yaml.safe_load((_rendered(tmp_path) / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert model_yaml["backend"] == "pytorch" and Path(model_yaml["model"]).is_absolute()
    # upstream model.py: auto_complete_config reads triton_config.decoupled and max_batch_size; the rest goes to LLM()
    assert isinstance(model_yaml["triton_config"]["decoupled"], bool)
    assert model_yaml["triton_config"]["max_batch_size"] == 0

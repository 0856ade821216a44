"""The SamplingParams the LLM-API model's GPU branch builds (model_repo_templates/llmapi/tensorrt_llm/1/model.py,
Job.sampling_kwargs) are keyword arguments TensorRT-LLM 1.1.0's SamplingParams takes
(data/trtllm11_sampling_params.tsv, read from the 1.1.0 source), and a request for return_cumulative_logprob
asks for log-probs: 1.1 fills CompletionOutput.cumulative_logprob only for a request whose `logprobs` is set
(the table's header names the lines). No TensorRT-LLM here, so the kwargs are what is checked; the template is
imported as a module with `triton_python_backend_utils` standing in as an empty module (Job and
sampling_kwargs do not touch it)."""

from __future__ import annotations

import csv
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "model_repo_templates" / "llmapi" / "tensorrt_llm" / "1" / "model.py"
TABLE = Path(__file__).resolve().parent / "data" / "trtllm11_sampling_params.tsv"


@pytest.fixture(scope="module")
def template():
    saved = sys.modules.get("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = types.ModuleType("triton_python_backend_utils")
    try:
        sys.path.insert(0, str(ROOT / "model_repo_templates"))  # its pipeline_model_support, as rendered beside it
        spec = importlib.util.spec_from_file_location("llmapi_model_template", TEMPLATE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "model_repo_templates"))
        if saved is None:
            sys.modules.pop("triton_python_backend_utils", None)
        else:
            sys.modules["triton_python_backend_utils"] = saved
    return module


def _fields() -> dict[str, dict[str, str]]:
    with open(TABLE, encoding="utf-8", newline="") as handle:
        rows = csv.DictReader((line for line in handle if not line.startswith("#")), delimiter="\t")
        return {row["field"]: row for row in rows}


def _job(template, **inputs):
    arrays = {"text_input": np.array([b"The capital of France is"], dtype=np.object_)}
    arrays.update({name: np.array([value]) for name, value in inputs.items()})
    return template.Job(arrays.get)


def test_the_table_is_the_1_1_0_dataclass() -> None:
    fields = _fields()
    assert len(fields) == 47 and fields["max_tokens"]["default"] == "32"
    assert fields["exclude_input_from_output"]["default"] == "True" and fields["logprobs"]["type"] == "Optional[int]"


def test_every_keyword_the_gpu_branch_passes_is_a_1_1_0_sampling_params_field(template) -> None:
    job = _job(template, sampling_param_temperature=0.5, sampling_param_top_k=4, sampling_param_top_p=0.9,
               sampling_param_seed=7, sampling_param_frequency_penalty=0.1, sampling_param_presence_penalty=0.2,
               sampling_param_return_perf_metrics=True, return_cumulative_logprob=True,
               sampling_param_exclude_input_from_output=True)
    job.stop = ["."]
    kwargs = job.sampling_kwargs()
    assert set(kwargs) <= set(_fields()), set(kwargs) - set(_fields())
    assert {"max_tokens", "temperature", "top_k", "top_p", "seed", "best_of", "stop", "logprobs"} <= set(kwargs)


def test_cumulative_logprob_asks_for_log_probs(template) -> None:
    assert _job(template, return_cumulative_logprob=True).sampling_kwargs()["logprobs"] == 1
    # not asked: no log-probs (their cost is not paid)
    assert "logprobs" not in _job(template).sampling_kwargs()
    assert "logprobs" not in _job(template, return_cumulative_logprob=False).sampling_kwargs()


def test_the_contract_defaults_reach_sampling_params(template) -> None:
    kwargs = _job(template).sampling_kwargs()
    # upstream helpers.py default_values: best_of 1, exclude_input_from_output False (SamplingParams' own is True)
    assert kwargs["best_of"] == 1 and kwargs["exclude_input_from_output"] is False and kwargs["max_tokens"] == 32

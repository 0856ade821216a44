"""pipeline.client.build_inputs: the tensors an NVIDIA-style ensemble/BLS client sends."""

from __future__ import annotations

import numpy as np

from pipeline.client import GenerateRequest, build_inputs
from pipeline.smoke_checks import _pick_stop_word


def _by_name(request: GenerateRequest) -> dict:
    return {i.name(): i for i in build_inputs(request)}


def test_minimal_request_sends_only_what_is_set() -> None:
    inputs = _by_name(GenerateRequest(prompt="héllo", max_tokens=5, return_num_output_tokens=False,
                                      exclude_input_in_output=None))
    assert set(inputs) == {"text_input", "max_tokens", "stream"}
    assert inputs["text_input"].datatype() == "BYTES" and inputs["text_input"].shape() == [1, 1]
    assert inputs["max_tokens"].datatype() == "INT32"


def test_every_option_maps_to_its_tensor() -> None:
    request = GenerateRequest(prompt="p", max_tokens=3, stream=True, stop_words=("a", "b"), bad_words=("c",),
                              end_id=2, pad_id=2, top_k=5, top_p=0.9, temperature=0.7, seed=11, min_tokens=1,
                              return_log_probs=True, return_perf_metrics=True)
    inputs = _by_name(request)
    expected = {"text_input": "BYTES", "max_tokens": "INT32", "stream": "BOOL", "stop_words": "BYTES",
                "bad_words": "BYTES", "end_id": "INT32", "pad_id": "INT32", "top_k": "INT32", "top_p": "FP32",
                "temperature": "FP32", "seed": "UINT64", "min_tokens": "INT32", "exclude_input_in_output": "BOOL",
                "return_log_probs": "BOOL", "return_perf_metrics": "BOOL", "return_num_output_tokens": "BOOL"}
    assert {name: i.datatype() for name, i in inputs.items()} == expected
    assert inputs["stop_words"].shape() == [1, 2]
    assert all(i.shape()[0] == 1 for i in inputs.values())  # the batch dimension the models expect
    assert np.float32(0.9) == np.float32(request.top_p)


def test_stop_word_is_taken_from_inside_the_text() -> None:
    assert _pick_stop_word(" Paris.\n\nThe answer is") == " answer"
    assert _pick_stop_word("") is None

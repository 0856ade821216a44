"""pipeline.clients.triton.build_inputs: the tensors an NVIDIA-style ensemble/BLS client sends."""

from __future__ import annotations

import numpy as np

from pipeline.clients.triton import GenerateRequest, build_inputs
from pipeline.smoke.checks import _pick_stop_word


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


def _response(text: list[bytes] | None = None, perf: dict[str, int] | None = None, final: bool = False):
    """A real tritonclient.grpc InferResult over a ModelInferResponse as the server serialises it."""
    from tritonclient.grpc import InferResult, service_pb2
    from tritonclient.utils import serialize_byte_tensor

    response = service_pb2.ModelInferResponse(model_name="ensemble", id="1")
    if text is not None:
        response.outputs.add(name="text_output", datatype="BYTES", shape=[1, len(text)])  # contents: raw_output_contents
        response.raw_output_contents.append(serialize_byte_tensor(np.array(text, dtype=np.object_)).item())
    for name, value in (perf or {}).items():
        response.outputs.add(name=name, datatype="INT64", shape=[1, 1])
        response.raw_output_contents.append(np.array([[value]], dtype=np.int64).tobytes())
    response.parameters["triton_final_response"].bool_param = final
    return InferResult(response)


PERF = {"arrival_time_ns": 10, "first_scheduled_time_ns": 20, "first_token_time_ns": 30, "last_token_time_ns": 40}


def test_perf_timestamps_are_read_in_one_place_for_every_client() -> None:
    from pipeline.bench.transport import _chunk
    from pipeline.clients.triton import GenerateResult, collect_llmapi_response, collect_response, perf_times

    result = _response([" caf".encode(), "é".encode()], PERF, final=True)
    assert perf_times(result) == PERF and perf_times(_response([b"x"])) == {}
    whole, llmapi = GenerateResult(), GenerateResult()
    collect_response(result, whole, [])
    collect_llmapi_response(result, llmapi, [])
    chunk = _chunk(result, perf_metrics=True)
    assert whole.perf == llmapi.perf == chunk.perf == PERF
    assert chunk.text.decode() == " café" and whole.chunks == [" caf", "é"] and llmapi.chunks == [" café"]
    assert _chunk(result, perf_metrics=False).perf is None
    assert _chunk(_response(None, PERF), perf_metrics=True).text == b""  # perf only: no text part


def test_streamed_responses_fold_the_same_way_in_generate_and_bench() -> None:
    """Ensemble text_output is a delta per response; the LLM-API model's is the text so far."""
    from pipeline.bench.transport import _chunk
    from pipeline.clients.triton import GenerateResult, collect_llmapi_response, collect_response

    deltas, cumulative = [[b" Par"], [b"is"], [b"."]], [[b" Par"], [b" Paris"], [b" Paris."]]
    ensemble, raw = GenerateResult(), []
    for text in deltas:
        collect_response(_response(text), ensemble, raw)
    llmapi, raw_llmapi = GenerateResult(), []
    for text in cumulative:
        collect_llmapi_response(_response(text), llmapi, raw_llmapi)
    assert b"".join(raw).decode() == b"".join(raw_llmapi).decode() == " Paris."
    assert ensemble.chunks == llmapi.chunks == [" Par", "is", "."]
    assert b"".join(_chunk(_response(t), False).text for t in deltas) == b" Paris."  # bench: one part per delta
    assert _chunk(_response(cumulative[-1]), False).text == b" Paris."  # bench: the last part replaces the rest


def test_declared_inputs_leave_the_undeclared_optional_ones_out() -> None:
    request = GenerateRequest(prompt="p", max_tokens=3, stream=True, min_tokens=3, return_perf_metrics=True,
                              return_num_output_tokens=False)
    sent = {i.name() for i in build_inputs(request, declared=frozenset({"text_input", "max_tokens", "stream",
                                                                          "min_tokens"}))}
    assert sent == {"text_input", "max_tokens", "stream", "min_tokens"}
    assert "exclude_input_in_output" in {i.name() for i in build_inputs(request)}


def test_speculation_counts_are_read_with_nvidias_names_and_dtypes() -> None:
    """acceptance_rate FP32 [1], total_accepted_draft_tokens / total_draft_tokens INT32 [1] (fact 1.20); the LLM-API
    model may send them as strings (fact 2.18): both read as numbers, and the bench's chunk carries them."""
    from tritonclient.grpc import InferResult, service_pb2
    from tritonclient.utils import serialize_byte_tensor

    from pipeline.bench.transport import _chunk
    from pipeline.clients.triton import speculation_counts

    response = service_pb2.ModelInferResponse(model_name="ensemble", id="1")
    for name, datatype, array in (("acceptance_rate", "FP32", np.array([[0.75]], dtype=np.float32)),
                                  ("total_accepted_draft_tokens", "INT32", np.array([[12]], dtype=np.int32)),
                                  ("total_draft_tokens", "INT32", np.array([[16]], dtype=np.int32))):
        response.outputs.add(name=name, datatype=datatype, shape=[1, 1])
        response.raw_output_contents.append(array.tobytes())
    counts = {"acceptance_rate": 0.75, "total_accepted_draft_tokens": 12.0, "total_draft_tokens": 16.0}
    assert speculation_counts(InferResult(response)) == counts
    assert _chunk(InferResult(response), perf_metrics=True).perf == counts
    text = service_pb2.ModelInferResponse(model_name="tensorrt_llm", id="1")
    text.outputs.add(name="total_draft_tokens", datatype="BYTES", shape=[1])
    text.raw_output_contents.append(serialize_byte_tensor(np.array([b"16"], dtype=np.object_)).item())
    assert speculation_counts(InferResult(text)) == {"total_draft_tokens": 16.0}
    assert speculation_counts(_response([b"x"])) == {}

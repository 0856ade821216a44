"""Every response of our models has the tensors, shapes and dtypes NVIDIA's models give it.

The facts come from NVIDIA's sources (tests/conformance/data/tensorrtllm_backend_responses.tsv names the
commit and the lines); the requests are the ones NVIDIA's own clients send
(tensorrtllm_backend @c2e65b88: inflight_batcher_llm/client/end_to_end_grpc_client.py,
inflight_batcher_llm_client.py, tools/inflight_batcher_llm/end_to_end_test.py). Those clients read
`as_numpy("text_output")[0].decode()`, `as_numpy("kv_cache_alloc_new_blocks")[0][0]` and feed
preprocessing's DECODER_INPUT_ID to tensorrt_llm: what they rely on is asserted here, against the real
demo server (the reference runtime behind the same tensor contract).
"""

from __future__ import annotations

import csv
import queue
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.triton, pytest.mark.slow]

FACTS = Path(__file__).parent / "data" / "tensorrtllm_backend_responses.tsv"
PROMPT = "The capital of France is"
DTYPES = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "BYTES": np.object_}


def facts(model: str) -> dict[str, dict[str, str]]:
    with open(FACTS, encoding="utf-8") as handle:
        rows = csv.DictReader((line for line in handle if not line.startswith("#")), delimiter="\t")
        return {row["tensor"]: row for row in rows if row["model"] == model}


def expected_shape(row: dict[str, str], *, tokens: int | None = None) -> list[int | None]:
    """[1, W, L] -> [1, 1, tokens] for one request, one beam; L without a count matches any length."""
    sizes = {"1": 1, "B": 1, "W": 1, "B * W": 1, "0": 0, "2": 2}
    return [sizes.get(part.strip(), tokens) for part in row["shape"].strip("[]").split(",")]


def assert_matches(model: str, tensor: str, array: np.ndarray, row: dict[str, str], tokens: int | None = None) -> None:
    want = expected_shape(row, tokens=tokens)
    assert len(array.shape) == len(want), f"{model} {tensor}: shape {array.shape}, NVIDIA's is {row['shape']}"
    for have, expected in zip(array.shape, want):
        assert expected is None or have == expected, f"{model} {tensor}: shape {array.shape}, NVIDIA's is {row['shape']}"
    assert array.dtype == DTYPES[row["dtype"]], f"{model} {tensor}: dtype {array.dtype}, NVIDIA's is {row['dtype']}"


def tensor(grpcclient, name: str, value: np.ndarray):
    from tritonclient.utils import np_to_triton_dtype

    item = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    item.set_data_from_numpy(value)
    return item


def stream(url: str, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None) -> list:
    """All responses of one request over a gRPC stream, as NVIDIA's clients read them."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    requested = [grpcclient.InferRequestedOutput(name) for name in outputs] if outputs else None
    client.async_stream_infer(model, [tensor(grpcclient, k, v) for k, v in inputs.items()], outputs=requested)
    client.stop_stream()
    responses = []
    while not results.empty():
        result, error = results.get()
        assert error is None, f"{model}: {error}"
        if result.get_response().outputs:
            responses.append(result)
    client.close()
    assert responses, f"{model} sent no response with outputs"
    return responses


def infer(url: str, model: str, inputs: dict[str, np.ndarray]):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        return client.infer(model, [tensor(grpcclient, k, v) for k, v in inputs.items()])
    finally:
        client.close()


@pytest.fixture(scope="module")
def preprocessed(demo_server):
    """NVIDIA's end_to_end_test step 1: preprocessing called by hand with empty word lists."""
    return infer(demo_server.grpc_url, "preprocessing", {
        "QUERY": np.array([[PROMPT]], dtype=object),
        "BAD_WORDS_DICT": np.array([[""]], dtype=object),
        "STOP_WORDS_DICT": np.array([[""]], dtype=object),
        "REQUEST_OUTPUT_LEN": np.array([[8]], dtype=np.int32),
    })


def test_preprocessing_produces_every_output_nvidias_does(preprocessed) -> None:
    produced = {output.name for output in preprocessed.get_response().outputs}
    expected = facts("preprocessing")
    assert produced == set(expected), f"missing {set(expected) - produced}, extra {produced - set(expected)}"
    tokens = preprocessed.as_numpy("INPUT_ID").shape[1]
    for name, row in expected.items():
        assert_matches("preprocessing", name, preprocessed.as_numpy(name), row, tokens=tokens)
    pad = preprocessed.as_numpy("OUT_PAD_ID")[0][0]
    assert preprocessed.as_numpy("DECODER_INPUT_ID").tolist() == [[pad]]
    assert preprocessed.as_numpy("REQUEST_DECODER_INPUT_LEN").tolist() == [[1]]


def test_tensorrt_llm_takes_preprocessing_outputs_as_nvidias_flow_passes_them(demo_server, preprocessed) -> None:
    """end_to_end_test step 2 passes decoder_input_ids for a decoder-only model; TensorRT-LLM ignores it
    there (tensorrtllm_backend @c2e65b88 utils.cc:958-987), and so must we. Then step 3, postprocessing."""
    ids = preprocessed.as_numpy("INPUT_ID")
    inputs = {
        "input_ids": ids, "decoder_input_ids": preprocessed.as_numpy("DECODER_INPUT_ID"),
        "input_lengths": preprocessed.as_numpy("REQUEST_INPUT_LEN"),
        "request_output_len": preprocessed.as_numpy("REQUEST_OUTPUT_LEN"),
        "end_id": preprocessed.as_numpy("OUT_END_ID"), "pad_id": preprocessed.as_numpy("OUT_PAD_ID"),
        "stop_words_list": preprocessed.as_numpy("STOP_WORDS_IDS"),
        "bad_words_list": preprocessed.as_numpy("BAD_WORDS_IDS"),
        "embedding_bias": preprocessed.as_numpy("EMBEDDING_BIAS"),
    }
    [final] = stream(demo_server.grpc_url, "tensorrt_llm", inputs)
    rows = facts("tensorrt_llm")
    output_ids, lengths = final.as_numpy("output_ids"), final.as_numpy("sequence_length")
    assert_matches("tensorrt_llm", "output_ids", output_ids, rows["output_ids"], tokens=ids.shape[1] + 8)
    assert_matches("tensorrt_llm", "sequence_length", lengths, rows["sequence_length"])
    assert output_ids[0, 0, : ids.shape[1]].tolist() == ids[0].tolist()  # the prompt, then 8 new tokens
    post = infer(demo_server.grpc_url, "postprocessing", {"TOKENS_BATCH": output_ids, "SEQUENCE_LENGTH": lengths})
    assert_matches("postprocessing", "OUTPUT", post.as_numpy("OUTPUT"), facts("postprocessing")["OUTPUT"])
    by_hand = post.as_numpy("OUTPUT")[0].decode("utf-8")
    [whole] = stream(demo_server.grpc_url, "ensemble", {
        "text_input": np.array([[PROMPT]], dtype=object), "max_tokens": np.array([[8]], dtype=np.int32),
        "bad_words": np.array([[""]], dtype=object), "stop_words": np.array([[""]], dtype=object)})
    assert whole.as_numpy("text_output")[0].decode("utf-8") == by_hand


def test_tensorrt_llm_perf_metrics_and_log_probs_have_the_backends_shapes(demo_server, preprocessed) -> None:
    inputs = {
        "input_ids": preprocessed.as_numpy("INPUT_ID"), "input_lengths": preprocessed.as_numpy("REQUEST_INPUT_LEN"),
        "request_output_len": np.array([[6]], dtype=np.int32), "streaming": np.array([[True]]),
        "return_log_probs": np.array([[True]]), "return_perf_metrics": np.array([[True]]),
    }
    responses = stream(demo_server.grpc_url, "tensorrt_llm", inputs)
    rows = facts("tensorrt_llm")
    for response in responses:
        produced = {output.name for output in response.get_response().outputs}
        wanted = {name for name, row in rows.items() if row["when"] in ("always", "return_log_probs", "return_perf_metrics")
                  or row["when"].startswith("always ")}
        assert wanted <= produced, f"missing {wanted - produced}"
        for name in wanted:
            assert_matches("tensorrt_llm", name, response.as_numpy(name), rows[name])
        assert "batch_index" not in produced  # only for a request batch > 1
    final = responses[-1]
    assert final.as_numpy("kv_cache_alloc_total_blocks")[0][0] >= 1
    assert final.as_numpy("first_token_time_ns")[0][0] >= final.as_numpy("arrival_time_ns")[0][0] > 0


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("streaming", [False, True])
def test_text_output_is_flat_as_nvidias_clients_read_it(demo_server, model: str, streaming: bool) -> None:
    """end_to_end_grpc_client.py: `output[0].decode("utf-8")` on every response, streamed or not."""
    inputs = {
        "text_input": np.array([[PROMPT]], dtype=object), "max_tokens": np.array([[8]], dtype=np.int32),
        "stream": np.array([[streaming]]), "beam_width": np.array([[1]], dtype=np.int32),
        "temperature": np.array([[1.0]], dtype=np.float32), "return_perf_metrics": np.array([[True]]),
    }
    perf = ["kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks", "arrival_time_ns",
            "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns", "acceptance_rate",
            "total_accepted_draft_tokens", "total_draft_tokens"]
    responses = stream(demo_server.grpc_url, model, inputs, outputs=["text_output", *perf])
    row = facts(model)["text_output"]
    pieces = []
    for response in responses:
        text = response.as_numpy("text_output")
        assert_matches(model, "text_output", text, row)
        pieces.append(text[0].decode("utf-8"))
        for name in perf:  # the client reads each one as [0][0]
            value = response.as_numpy(name)
            assert value is not None and value.shape == (1, 1), f"{model} {name}: {None if value is None else value.shape}"
    text = "".join(pieces)
    assert text.strip() and (streaming or text.startswith(PROMPT))


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
@pytest.mark.parametrize("streaming", [False, True])
def test_a_request_batch_answers_each_entry_with_its_batch_index(demo_server, model: str, streaming: bool) -> None:
    """end_to_end_grpc_client.py --batch-inputs: prompts stacked into one request [B, 1]; the client
    places each response by `batch_index[0][0]` (the C++ backend splits the batch, utils.cc:181-193)."""
    prompts = [PROMPT, "One, two, three,"]
    single = {}
    for prompt in prompts:
        [response] = stream(demo_server.grpc_url, model, {
            "text_input": np.array([[prompt]], dtype=object), "max_tokens": np.array([[8]], dtype=np.int32),
            "exclude_input_in_output": np.array([[True]])})
        single[prompt] = response.as_numpy("text_output")[0].decode("utf-8")
    responses = stream(demo_server.grpc_url, model, {
        "text_input": np.array([[p] for p in prompts], dtype=object), "max_tokens": np.array([[8], [8]], dtype=np.int32),
        "stream": np.array([[streaming], [streaming]]), "exclude_input_in_output": np.array([[True], [True]])},
        outputs=["text_output", "batch_index"])
    texts = {0: "", 1: ""}
    for response in responses:
        index = response.as_numpy("batch_index")
        assert_matches(model, "batch_index", index, facts("tensorrt_llm")["batch_index"])
        text = response.as_numpy("text_output")
        assert_matches(model, "text_output", text, facts(model)["text_output"])
        texts[int(index[0][0])] += text[0].decode("utf-8")
    assert [texts[0], texts[1]] == [single[p] for p in prompts]

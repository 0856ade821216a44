"""Serving a Triton LLM-API repository (pipeline/render/llmapi.py): recognise one, and send it a request the
way its contract asks (`text_input`, `streaming`, `sampling_param_max_tokens`, `return_finish_reason`), for the
warm-up `pipeline serve` does before it reports ready and for the tests.

The answer follows upstream's semantics (pipeline/data/llmapi/contract.json): in streaming mode every
response's `text_output` is the text so far, so the last one holds the whole completion.
"""

from __future__ import annotations

import queue
import uuid
from dataclasses import dataclass, field
from pathlib import Path

MODEL = "tensorrt_llm"


def is_llmapi_repo(repo: Path) -> bool:
    """A repository whose tensorrt_llm model is NVIDIA's LLM-API model (a model.yaml beside its model.py)."""
    return (Path(repo) / MODEL / "1" / "model.yaml").is_file()


@dataclass
class LlmApiAnswer:
    text: str = ""
    finish_reason: str | None = None
    responses: int = 0
    error: str | None = None
    texts: list[str] = field(default_factory=list)  # text_output of every response, in order


def generate(grpc_url: str, prompt: str, *, max_tokens: int = 16, stream: bool = False, timeout_s: float = 120.0,
             extra: dict | None = None) -> LlmApiAnswer:
    """One request to the repository's LLM-API model (MODEL) over gRPC. Streaming goes through Triton's
    bidirectional stream (decoupled models need it for any request); errors come back in LlmApiAnswer.error, not raised."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    values = {"text_input": np.array([prompt.encode()], dtype=np.object_),
              "streaming": np.array([stream], dtype=bool),
              "sampling_param_max_tokens": np.array([max_tokens], dtype=np.int32),
              "return_finish_reason": np.array([True], dtype=bool),
              "sampling_param_exclude_input_from_output": np.array([True], dtype=bool)}
    values.update(extra or {})
    inputs = []
    for name, array in values.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "BYTES" if array.dtype == np.object_ else np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    answer = LlmApiAnswer()
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)),
                            stream_timeout=timeout_s)
        client.async_stream_infer(MODEL, inputs, request_id=uuid.uuid4().hex[:12], enable_empty_final_response=True)
        while True:
            try:
                result, error = results.get(timeout=timeout_s)
            except queue.Empty:
                answer.error = f"no response within {timeout_s:g} s"
                break
            if error is not None:
                answer.error = str(error)
                break
            response = result.get_response()
            final = response.parameters.get("triton_final_response")
            if result.as_numpy("text_output") is not None:
                answer.responses += 1
                answer.text = _first(result.as_numpy("text_output"))
                answer.texts.append(answer.text)
                reason = result.as_numpy("finish_reason")
                answer.finish_reason = _first(reason) if reason is not None else answer.finish_reason
            if final is not None and final.bool_param:
                break
    finally:
        client.stop_stream(cancel_requests=answer.error is not None)
        client.close()
    return answer


def _first(array) -> str:
    value = array.reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def warm_up(grpc_url: str, decoupled: bool, *, requests: int = 2, max_tokens: int = 4, timeout_s: float = 120.0) -> str:
    """A few short requests through the LLM-API contract (streamed when the model is decoupled); a failure or a
    missing finish_reason is a StageFailedError: a server that cannot answer is not ready."""
    from pipeline.core.errors import StageFailedError

    for _ in range(requests):
        answer = generate(grpc_url, "Hello, warm-up.", max_tokens=max_tokens, stream=decoupled, timeout_s=timeout_s)
        if answer.error is not None or answer.finish_reason in (None, "None"):
            raise StageFailedError(f"Warm-up request to the LLM-API model {MODEL!r} failed: "
                                   f"{answer.error or 'its last response carried no finish_reason'}",
                                   hint="See the server log (`pipeline serve --log-file`).")
    return MODEL

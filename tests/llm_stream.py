"""Token-level requests straight to the `tensorrt_llm` model (no tokenizer in between), for the tests that drive
the reference runtime's request handling (cancellation, request ids, log-probs): test support, not part of the
pipeline's clients."""

from __future__ import annotations

import queue
import uuid
from dataclasses import dataclass, field

import numpy as np

from pipeline.clients.triton import DEFAULT_TIMEOUT_S, error_text, is_final, tensor


@dataclass
class LlmResult:
    """One tensorrt_llm request: generated token ids (prompt dropped when it is echoed) and their log-probs."""

    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def llm_inputs(ids: list[int], max_tokens: int, *, streaming: bool = True, min_tokens: int | None = None,
               return_log_probs: bool = False) -> list:
    """Inputs of a greedy tensorrt_llm request for one prompt of token ids."""
    values = [("input_ids", np.array([ids], dtype=np.int32), "INT32"),
              ("input_lengths", np.array([[len(ids)]], dtype=np.int32), "INT32"),
              ("request_output_len", np.array([[max_tokens]], dtype=np.int32), "INT32"),
              ("streaming", np.array([[streaming]], dtype=bool), "BOOL")]
    if min_tokens is not None:
        values.append(("min_tokens", np.array([[min_tokens]], dtype=np.int32), "INT32"))
    if return_log_probs:
        values.append(("return_log_probs", np.array([[True]], dtype=bool), "BOOL"))
    return [tensor(name, array, dtype) for name, array, dtype in values]


def stop_inputs() -> list:
    """A `stop` request (sent with the request id of the requests to cancel), as NVIDIA's BLS sends it."""
    return [tensor(name, array, dtype) for name, array, dtype in (
        ("input_lengths", np.array([[1]], dtype=np.int32), "INT32"),
        ("request_output_len", np.array([[1]], dtype=np.int32), "INT32"),
        ("stop", np.array([[True]], dtype=bool), "BOOL"))]


class LlmStream:
    """One gRPC stream to the tensorrt_llm model (either transaction policy): `send` requests on it,
    `finish` collects the next one to end. Requests on one stream end in the order they were sent."""

    def __init__(self, url: str, model: str = "tensorrt_llm") -> None:
        import tritonclient.grpc as grpcclient

        self.model = model
        self.events: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result=None, error=None: self.events.put((result, error)))

    def send(self, inputs: list, request_id: str | None = None) -> None:
        """Send one request; request_id None: a fresh one ("" sends none)."""
        self.client.async_stream_infer(self.model, inputs, request_id=uuid.uuid4().hex if request_id is None else request_id,
                                       enable_empty_final_response=True)

    def next_chunk(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> LlmResult:
        """The next response as a result of its own (a streamed chunk, or an error)."""
        result, error = self.events.get(timeout=timeout_s)
        chunk = LlmResult()
        if error is not None:
            chunk.error = error_text(error)
        else:
            _add_llm_response(result, chunk)
        return chunk

    def finish(self, timeout_s: float = DEFAULT_TIMEOUT_S, *, prompt_len: int = 0) -> LlmResult:
        """The rest of the next request to end; `prompt_len` tokens are dropped from the front of an
        echoed prompt (a whole response with exclude_input_in_output false)."""
        collected = LlmResult()
        while True:
            result, error = self.events.get(timeout=timeout_s)
            if error is not None:
                collected.error = error_text(error)
                return collected
            _add_llm_response(result, collected)
            if is_final(result):
                collected.tokens = collected.tokens[prompt_len:]
                return collected

    def close(self) -> None:
        try:
            self.client.stop_stream(cancel_requests=True)
        finally:
            self.client.close()


def _add_llm_response(result, into: LlmResult) -> None:
    ids = result.as_numpy("output_ids")
    if ids is not None:
        length = int(result.as_numpy("sequence_length").reshape(-1)[0])
        into.tokens.extend(int(t) for t in ids.reshape(-1)[:length])
    log_probs = result.as_numpy("output_log_probs")
    if log_probs is not None:
        into.log_probs.extend(float(v) for v in log_probs.reshape(-1))


def llm_generate(url: str, ids: list[int], max_tokens: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 **options) -> LlmResult:
    """One streamed greedy tensorrt_llm request (llm_inputs options); never raises for a server-side error."""
    stream = LlmStream(url)
    try:
        stream.send(llm_inputs(ids, max_tokens, **options))
        return stream.finish(timeout_s)
    finally:
        stream.close()

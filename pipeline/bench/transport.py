"""One streamed request over tritonclient.grpc.aio, and what the runner needs from a transport.

A request opens its own gRPC bidirectional stream, sends one request and half-closes; Triton ends
the stream after the request's last response, so the end of the stream marks completion whether or
not the model sends an empty final response. Every response with text_output is one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, NamedTuple, Protocol

from pipeline.bench.workload import BenchRequest
from pipeline.clients.contract import served_tokenizer_dir
from pipeline.clients.triton import (GenerateRequest, build_inputs, build_llmapi_inputs, perf_times, speculation_counts,
                                     text_pieces)
from pipeline.core.errors import InvalidInputError, StageFailedError, UnsupportedError


class Chunk(NamedTuple):
    """One streamed response: its text (str, or raw UTF-8 bytes decoded after the run), or an
    error; perf holds server timestamps. A tuple: it is made once per token on the hot path.
    replace: the text is the whole text so far (the LLM-API model's cumulative text_output), not an addition."""

    text: str | bytes = ""
    error: str | None = None
    perf: dict[str, float] | None = None  # timestamps (ns) and speculation counts
    replace: bool = False


class Usage(NamedTuple):
    """A streamed event that carries counts but no text (OpenAI's final usage chunk): the runner keeps it
    without stamping a time, so it is neither a token nor the end of the output."""

    completion_tokens: int | None
    prompt_tokens: int | None


class Transport(Protocol):
    """stream() yields (payload, error) per response, error None when it is fine; decode(payload)
    turns a payload into a Chunk after the run, so the hot path only stamps times. A transport may
    also have compact(payload) -> smaller payload, called on the hot path to bound memory."""

    def stream(self, request: BenchRequest) -> AsyncIterator[tuple[Any, Any]]: ...

    def decode(self, payload: Any) -> Chunk: ...


@dataclass(frozen=True)
class ModelInfo:
    """What the served model accepts: its input names, whether it has a batch dimension, and the
    tokenizer folder its preprocessing model names."""

    name: str
    inputs: frozenset[str]
    batched: bool
    tokenizer_dir: Path | None = None
    contract: str = "triton-ensemble"  # pipeline.clients.contract.Kind
    decoupled: bool = True


def model_info(url: str, model: str) -> ModelInfo:
    """Ask the server (synchronous gRPC) about `model` and where its tokenizer lives."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        client = grpcclient.InferenceServerClient(url)
    except InferenceServerException as error:  # pragma: no cover - bad URL syntax
        raise InvalidInputError(f"Bad server URL {url!r}: {error}", hint="Use HOST:PORT of the gRPC endpoint.") from None
    try:
        try:
            if not client.is_server_ready():
                raise StageFailedError(f"The server at {url} is not ready.", hint="Wait for `pipeline serve` to report ready.")
            config = client.get_model_config(model).config
        except InferenceServerException as error:
            raise StageFailedError(f"Cannot query model {model!r} at {url}: {error.message()}",
                                   hint="Check --url (the gRPC port, 8001 by default) and --model (ensemble or tensorrt_llm_bls).") from None
        inputs = frozenset(i.name for i in config.input)
        missing = {"text_input", "max_tokens", "stream"} - inputs
        if missing:
            raise InvalidInputError(f"Model {model!r} has no input(s) {sorted(missing)}: it is not a streaming text model.",
                                    hint="Benchmark the ensemble or tensorrt_llm_bls model (--model).")
        if config.max_batch_size == 0:
            raise UnsupportedError(f"Model {model!r} has no batch dimension (max_batch_size 0); bench sends [1, 1] tensors "
                                   "as NVIDIA's ensemble and BLS models take them.",
                                   hint="Benchmark the ensemble or tensorrt_llm_bls model.")
        return ModelInfo(name=model, inputs=inputs, batched=config.max_batch_size > 0,
                         tokenizer_dir=served_tokenizer_dir(client, config))
    finally:
        client.close()


def build_request_inputs(request: BenchRequest, info: ModelInfo, *, perf_metrics: bool) -> list:
    """The ensemble/BLS inputs of one streamed request, through pipeline.clients.triton.build_inputs;
    optional inputs the model does not declare are left out."""
    return build_inputs(GenerateRequest(prompt=request.prompt, max_tokens=request.max_tokens, stream=True,
                                        min_tokens=request.min_tokens, return_perf_metrics=perf_metrics,
                                        lora_task_id=request.lora_task_id,
                                        return_num_output_tokens=False), declared=info.inputs)


class TritonTransport:
    """Streams requests to one model through one shared tritonclient.grpc.aio client."""

    def __init__(self, url: str, info: ModelInfo, *, perf_metrics: bool = False, timeout_s: float | None = None) -> None:
        import tritonclient.grpc.aio as aioclient

        self.info = info
        self.perf_metrics = perf_metrics and "return_perf_metrics" in info.inputs
        self.timeout_s = timeout_s
        self.client = aioclient.InferenceServerClient(url)

    async def close(self) -> None:
        await self.client.close()

    def stream(self, request: BenchRequest) -> AsyncIterator[tuple[Any, Any]]:
        """tritonclient's own response iterator, unwrapped: (InferResult, None) or (None, error).
        gRPC failures raise from it and become the request's error in the runner."""
        inputs = build_request_inputs(request, self.info, perf_metrics=self.perf_metrics)

        async def one_request():
            yield {"model_name": self.info.name, "inputs": inputs, "request_id": str(request.index)}

        return self.client.stream_infer(one_request(), stream_timeout=self.timeout_s)

    def compact(self, result: Any) -> Any:
        """On the hot path: keep only text_output's serialized bytes (a few bytes per token, instead
        of the whole response object, so long runs stay small). With perf metrics the whole result
        is kept, for its timestamp outputs."""
        if self.perf_metrics:
            return result
        response = result.get_response()
        outputs = response.outputs
        for index in range(len(outputs)):
            if outputs[index].name == "text_output":
                return response.raw_output_contents[index]
        return b""

    def decode(self, payload: Any) -> Chunk:
        if isinstance(payload, bytes):
            return Chunk(text=_bytes_tensor_join(payload))
        return _chunk(payload, self.perf_metrics)


class LlmApiTransport(TritonTransport):
    """The Triton LLM-API model (pipeline.clients.triton.build_llmapi_inputs): streamed when the model is decoupled
    (else one whole response per request, so TTFT equals the latency); text_output is cumulative, so every
    chunk replaces the text so far. No min_tokens input: output lengths are not forced."""

    def stream(self, request: BenchRequest) -> AsyncIterator[tuple[Any, Any]]:
        inputs = build_llmapi_inputs(GenerateRequest(prompt=request.prompt, max_tokens=request.max_tokens,
                                                     stream=self.info.decoupled, return_perf_metrics=self.perf_metrics),
                                     batched=self.info.batched, declared=self.info.inputs)

        async def one_request():
            yield {"model_name": self.info.name, "inputs": inputs, "request_id": str(request.index)}

        return self.client.stream_infer(one_request(), stream_timeout=self.timeout_s)

    def decode(self, payload: Any) -> Chunk:
        chunk = TritonTransport.decode(self, payload)
        return chunk._replace(replace=True)


def _bytes_tensor_join(raw: bytes) -> bytes:
    """The elements of a serialized Triton BYTES tensor (4-byte little-endian length + data each), joined."""
    parts, offset = [], 0
    while offset + 4 <= len(raw):
        size = int.from_bytes(raw[offset:offset + 4], "little")
        parts.append(raw[offset + 4:offset + 4 + size])
        offset += 4 + size
    return b"".join(parts)


def _chunk(result: Any, perf_metrics: bool) -> Chunk:
    """A whole response (kept when perf metrics are asked for) read through the client's parsers."""
    pieces = text_pieces(result)
    perf = {**perf_times(result), **speculation_counts(result)} if perf_metrics else None
    return Chunk(text=b"".join(pieces or ()), perf=perf or None)

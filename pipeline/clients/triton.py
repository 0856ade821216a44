"""The one Triton client, for both tensor contracts: NVIDIA's `ensemble` / `tensorrt_llm_bls` tensors and the
LLM-API model's (`llmapi`). Smoke, bench, serve's warm-up and the tests all go through it.

One place each: `tensor` makes every InferInput; `build_inputs` / `build_llmapi_inputs` build a request's
inputs (optional ones the model does not declare left out); `text_pieces` reads text_output and
`perf_times` the perf timestamps; `collect_response` / `collect_llmapi_response` fold one response (a delta,
or the LLM-API model's text so far) into a GenerateResult. The InferInputs work with tritonclient.grpc and
tritonclient.grpc.aio alike (bench's aio transport decodes its responses with the same readers).
`generate` is a blocking helper that always uses the gRPC stream API (it serves decoupled
and non-decoupled models alike) and sets the `stream` input to choose streamed or whole responses;
`is_decoupled` tells which of the two a served model is. The OpenAI contract is pipeline.clients.openai.
"""

from __future__ import annotations

import queue
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class GenerateRequest:
    """The inputs NVIDIA's ensemble and BLS models take (None: not sent, the server default applies)."""

    prompt: str
    max_tokens: int = 32
    stream: bool = False
    stop_words: tuple[str, ...] = ()
    bad_words: tuple[str, ...] = ()
    end_id: int | None = None
    pad_id: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    seed: int | None = None
    min_tokens: int | None = None
    exclude_input_in_output: bool | None = True
    return_log_probs: bool = False
    return_perf_metrics: bool = False
    return_num_output_tokens: bool = True
    lora_task_id: int | None = None  # an adapter the server holds (prefetched or cached): the id alone
    # the LLM-API model's per-request adapter: lora_id (= lora_task_id), lora_name and lora_path, all three or none
    lora_name: str | None = None
    lora_path: str | None = None


@dataclass
class GenerateResult:
    text: str = ""
    chunks: list[str] = field(default_factory=list)
    responses: int = 0
    output_tokens: int | None = None
    cum_log_probs: float | None = None
    output_log_probs: list[float] = field(default_factory=list)
    ttft_s: float | None = None
    latency_s: float = 0.0
    error: str | None = None
    perf: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None  # the LLM-API and OpenAI contracts say why generation ended
    prompt_tokens: int | None = None  # OpenAI usage.prompt_tokens (chat template included)
    status: int | None = None  # OpenAI: the HTTP status

    @property
    def ok(self) -> bool:
        return self.error is None


# The server timestamps a response carries when its request sets return_perf_metrics: the same four outputs on
# tensorrt_llm, ensemble and tensorrt_llm_bls (pipeline/data/reference/triton_trtllm_model_io.tsv) and on the
# LLM-API model (pipeline/data/llmapi/contract.json). perf_times is the one place they are read.
PERF_OUTPUTS = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")


def perf_times(result) -> dict[str, int]:
    """The perf timestamps (ns) one response carries, by output name (empty: none asked for)."""
    values = {name: result.as_numpy(name) for name in PERF_OUTPUTS}
    return {name: int(value.reshape(-1)[0]) for name, value in values.items() if value is not None and value.size}


# Speculative decoding's per-request counts, returned beside the timestamps when return_perf_metrics is set:
# acceptance_rate FP32 [1], total_accepted_draft_tokens INT32 [1], total_draft_tokens INT32 [1] on tensorrt_llm, the
# ensemble and the BLS (tensorrtllm_backend@c2e65b88 all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt:565,570,575;
# ensemble L336-346; BLS L377-387) and on the LLM-API model (which may send them as strings: float() reads both).
SPECULATION_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")


def speculation_counts(result) -> dict[str, float]:
    """The speculation outputs one response carries, by name (empty: none sent)."""
    out = {}
    for name in SPECULATION_OUTPUTS:
        value = result.as_numpy(name)
        if value is not None and value.size:
            item = value.reshape(-1)[0]
            out[name] = float(item.decode() if isinstance(item, bytes) else item)
    return out


def text_pieces(result) -> list[bytes] | None:
    """text_output's elements as raw UTF-8 bytes (joined by the caller, so a character split across
    responses decodes whole); None when the response has no text_output."""
    text = result.as_numpy("text_output")
    if text is None:
        return None
    return [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in text.reshape(-1)]


def tensor(name: str, array: np.ndarray, triton_type: str):
    """One tritonclient.grpc.InferInput holding `array` (every request input here is made by it)."""
    from tritonclient.grpc import InferInput

    item = InferInput(name, list(array.shape), triton_type)
    item.set_data_from_numpy(array)
    return item


def build_inputs(request: GenerateRequest, *, declared: frozenset[str] = frozenset()) -> list:
    """GenerateRequest -> the ensemble/BLS inputs (tritonclient.grpc.InferInput, batch dimension 1). Optional
    inputs the model does not declare are left out (all are sent when `declared` is empty)."""
    inputs = [
        tensor("text_input", np.array([[request.prompt.encode("utf-8")]], dtype=object), "BYTES"),
        tensor("max_tokens", np.array([[request.max_tokens]], dtype=np.int32), "INT32"),
        tensor("stream", np.array([[request.stream]], dtype=bool), "BOOL"),
    ]
    for name, words in (("stop_words", request.stop_words), ("bad_words", request.bad_words)):
        if words and (not declared or name in declared):
            inputs.append(tensor(name, np.array([[w.encode("utf-8") for w in words]], dtype=object), "BYTES"))
    scalars = (
        ("end_id", request.end_id, np.int32, "INT32"),
        ("pad_id", request.pad_id, np.int32, "INT32"),
        ("top_k", request.top_k, np.int32, "INT32"),
        ("top_p", request.top_p, np.float32, "FP32"),
        ("temperature", request.temperature, np.float32, "FP32"),
        ("seed", request.seed, np.uint64, "UINT64"),
        ("min_tokens", request.min_tokens, np.int32, "INT32"),
        ("exclude_input_in_output", request.exclude_input_in_output, bool, "BOOL"),
        ("return_log_probs", request.return_log_probs or None, bool, "BOOL"),
        ("return_perf_metrics", request.return_perf_metrics or None, bool, "BOOL"),
        ("return_num_output_tokens", request.return_num_output_tokens or None, bool, "BOOL"),
        ("lora_task_id", request.lora_task_id, np.uint64, "UINT64"),
    )
    for name, value, np_type, triton_type in scalars:
        if value is not None and (not declared or name in declared):
            inputs.append(tensor(name, np.array([[value]], dtype=np_type), triton_type))
    return inputs


# The Triton LLM-API contract (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt and
# 1/helpers.py @c8c6df08bd0ead54cd47f7973e1e425c28a174cd, the stored version nearest 1.1.0): one prompt per
# request (model.yaml's max_batch_size 0 upstream: no batch dimension), `streaming` chooses streamed responses
# (decoupled models only), sampling_param_* carry SamplingParams, return_finish_reason asks for finish_reason.
# text_output is CompletionOutput.text: when streaming, the text so far (cumulative), not a delta.
LLMAPI_INPUTS = frozenset({"text_input", "streaming", "sampling_param_max_tokens"})
LLMAPI_OUTPUTS = frozenset({"text_output", "finish_reason"})


def build_llmapi_inputs(request: GenerateRequest, *, batched: bool = False, declared: frozenset[str] = frozenset()) -> list:
    """GenerateRequest -> the LLM-API model's inputs ([1]-shaped, or [1, 1] when the model has a batch
    dimension). Optional inputs the model does not declare are left out (all are sent when `declared` is empty)."""

    def values(name: str, items: list, np_type, triton_type: str):
        return tensor(name, np.array([items] if batched else items, dtype=np_type), triton_type)

    inputs = [values("text_input", [request.prompt.encode("utf-8")], object, "BYTES"),
              values("streaming", [request.stream], bool, "BOOL")]
    if request.stop_words:
        inputs.append(values("sampling_param_stop", [w.encode("utf-8") for w in request.stop_words], object, "BYTES"))
    scalars = (
        ("sampling_param_max_tokens", request.max_tokens, np.int32, "INT32"),
        ("sampling_param_top_k", request.top_k, np.int32, "INT32"),
        ("sampling_param_top_p", request.top_p, np.float32, "FP32"),
        ("sampling_param_temperature", request.temperature, np.float32, "FP32"),
        ("sampling_param_seed", request.seed, np.uint64, "UINT64"),
        ("sampling_param_exclude_input_from_output", request.exclude_input_in_output, bool, "BOOL"),
        ("sampling_param_return_perf_metrics", request.return_perf_metrics or None, bool, "BOOL"),
        ("return_finish_reason", True, bool, "BOOL"),
    )
    if request.lora_task_id is not None:  # the model takes the three together (its _lora_fields)
        scalars += (("lora_id", request.lora_task_id, np.uint64, "UINT64"),
                    ("lora_name", (request.lora_name or str(request.lora_task_id)).encode("utf-8"), object, "BYTES"),
                    ("lora_path", (request.lora_path or "").encode("utf-8"), object, "BYTES"))
    for name, value, np_type, triton_type in scalars:
        if value is not None and (not declared or name in declared):
            inputs.append(values(name, [value], np_type, triton_type))
    return inputs


def collect_llmapi_response(result, into: GenerateResult, raw: list[bytes]) -> None:
    """Fold one LLM-API response into a GenerateResult: text_output is cumulative, so the new chunk is what
    it adds to the text so far (a response that does not extend it replaces it)."""
    pieces = text_pieces(result)
    if pieces is not None:
        full = b"".join(pieces)
        before = b"".join(raw)
        added = full[len(before):] if full.startswith(before) else full
        raw[:] = [full]
        into.chunks.append(added.decode("utf-8", errors="replace"))
        into.responses += 1
    reason = result.as_numpy("finish_reason")
    if reason is not None and reason.size:
        value = reason.reshape(-1)[0]
        value = value.decode("utf-8") if isinstance(value, bytes) else str(value)
        into.finish_reason = None if value == "None" else value
    into.perf.update(perf_times(result))


def is_decoupled(client, model: str) -> bool:
    """Whether `model` answers a request with a stream of responses: its config.pbtxt sets
    model_transaction_policy { decoupled: true }, or it is an ensemble with a decoupled step (the ensemble
    streams what its steps stream). Read from the server (tritonclient.grpc client), i.e. from the
    repository as rendered. A model rendered with --no-decoupled refuses stream=true."""
    seen: set[str] = set()

    def decoupled(name: str) -> bool:
        if name in seen:
            return False
        seen.add(name)
        config = client.get_model_config(name).config
        if config.model_transaction_policy.decoupled:
            return True
        steps = config.ensemble_scheduling.step if config.platform == "ensemble" else ()
        return any(decoupled(step.model_name) for step in steps)

    return decoupled(model)


def error_text(error) -> str:
    """What a stream callback's error says (tritonclient's InferenceServerException has message())."""
    return error.message() if callable(getattr(error, "message", None)) else str(error)


def is_final(result) -> bool:
    """True for the response that ends a decoupled stream."""
    parameters = result.get_response().parameters
    return "triton_final_response" in parameters and parameters["triton_final_response"].bool_param


def collect_response(result, into: GenerateResult, raw: list[bytes]) -> None:
    """Fold one streamed response into a GenerateResult (text bytes kept raw for an exact join)."""
    pieces = text_pieces(result)
    if pieces is not None:
        for piece in pieces:
            raw.append(piece)
            into.chunks.append(piece.decode("utf-8", errors="replace"))
        into.responses += 1
    count = result.as_numpy("num_output_tokens")
    if count is not None:
        into.output_tokens = max(into.output_tokens or 0, int(count.reshape(-1)[0]))  # cumulative when streaming
    cum = result.as_numpy("cum_log_probs")
    if cum is not None:
        into.cum_log_probs = float(cum.reshape(-1)[0])
    logprobs = result.as_numpy("output_log_probs")
    if logprobs is not None:
        into.output_log_probs.extend(float(v) for v in logprobs.reshape(-1))
    into.perf.update(perf_times(result))


def generate(url: str, model: str, prompt: str | GenerateRequest, *, timeout_s: float = DEFAULT_TIMEOUT_S,
             llmapi: dict | None = None, **options) -> GenerateResult:
    """One request through the gRPC stream API; never raises for a server-side error (see .error).
    llmapi: the model speaks the LLM-API contract; its build_llmapi_inputs keywords (batched, declared)."""
    import tritonclient.grpc as grpcclient

    request = prompt if isinstance(prompt, GenerateRequest) else GenerateRequest(prompt=prompt, **options)
    inputs = build_inputs(request) if llmapi is None else build_llmapi_inputs(request, **llmapi)
    collect = collect_response if llmapi is None else collect_llmapi_response
    result, raw = GenerateResult(), []
    events: queue.Queue = queue.Queue()
    started = time.perf_counter()
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    try:
        try:
            client.start_stream(callback=lambda result=None, error=None: events.put((result, error)))
            client.async_stream_infer(model, inputs, request_id=uuid.uuid4().hex[:12],
                                      enable_empty_final_response=True)
        except InferenceServerException as error:
            result.error = f"could not send the request to {url}: {error.message()}"
            events.put((None, None))
        deadline = started + timeout_s
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                result.error = f"no final response within {timeout_s:.0f} s"
                break
            try:
                response, error = events.get(timeout=remaining)
            except queue.Empty:
                continue
            if response is None and error is None:  # the request never left
                break
            if error is not None:
                result.error = error_text(error)
                break
            before = result.responses
            collect(response, result, raw)
            if result.responses > before and result.ttft_s is None:
                result.ttft_s = time.perf_counter() - started
            if is_final(response):
                break
    finally:
        try:
            client.stop_stream(cancel_requests=result.error is not None)
        finally:
            client.close()
    result.latency_s = time.perf_counter() - started
    result.text = b"".join(raw).decode("utf-8", errors="replace")
    return result


# ----------------------------------------------------------------------------------------------
# Token-level requests straight to the `tensorrt_llm` model (no tokenizer in between)

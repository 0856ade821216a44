"""The OpenAI-compatible HTTP API that `trtllm-serve`, `transformers serve` and vLLM speak, over aiohttp.

What smoke and bench need from it, and nothing else:
  - `parse_url`: the two forms `--url` takes, HOST:PORT (Triton gRPC) or http(s)://HOST[:PORT]/v1 (OpenAI);
  - `SseParser`: Server-Sent Events (`data: ...` lines, blank-line separated, `[DONE]` at the end);
  - `request_body` / `parse_event`: one streamed chat or text completion and what each event carries
    (a text delta, finish_reason, usage, or an error object);
  - `probe`: GET /v1/models and /health (absent on some servers: 404 is "not provided", not a failure);
  - `generate` (blocking, for smoke) and `stream_events` (async, for bench's OpenAITransport).

Chat requests (/v1/chat/completions) send the prompt as one user message: the SERVER applies the model's chat
template (trtllm-serve and transformers serve both do), so the client never templates text itself. Streamed
requests ask for usage with stream_options.include_usage (OpenAI's switch; trtllm-serve honours it,
transformers serve ignores the field with a warning and sends usage on the final chunk anyway). Token counts
are the server's usage.completion_tokens / usage.prompt_tokens when it reports them; callers fall back to the
served model's tokenizer when it does not (see pipeline.bench.session).

aiohttp is already installed with tritonclient[all] (its HTTP client), so this adds no dependency.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal

from pipeline.core.errors import InvalidInputError

Endpoint = Literal["chat", "completions"]
ENDPOINT_PATHS = {"chat": "/chat/completions", "completions": "/completions"}
URL_FORMS = "HOST:PORT for Triton's gRPC endpoint (e.g. localhost:8001) or http(s)://HOST:PORT/v1 for an " \
            "OpenAI-compatible server (e.g. http://localhost:8000/v1)"

_GRPC = re.compile(r"^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")
_OPENAI = re.compile(r"^https?://(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::\d{1,5})?/v1/?$")


@dataclass(frozen=True)
class ServerUrl:
    kind: Literal["grpc", "openai"]
    url: str  # HOST:PORT, or the OpenAI base URL without a trailing slash (.../v1)


def parse_url(url: str) -> ServerUrl:
    """`--url` as given: HOST:PORT (gRPC) or http(s)://HOST[:PORT]/v1 (OpenAI); anything else is refused."""
    text = (url or "").strip()
    if _GRPC.match(text):
        return ServerUrl("grpc", text)
    if _OPENAI.match(text):
        return ServerUrl("openai", text.rstrip("/"))
    raise InvalidInputError(f"--url {url!r} is neither a Triton gRPC endpoint nor an OpenAI base URL.",
                            hint=f"Use {URL_FORMS}.")


class SseParser:
    """Incremental Server-Sent Events parser: feed bytes, get the `data` of each complete event.

    Follows the WHATWG event-stream rules that matter here: lines end in \\n, \\r\\n or \\r; an event ends at
    a blank line; several `data:` lines of one event join with \\n; one space after the colon is dropped;
    lines starting with ':' are comments; other fields (event:, id:, retry:) are ignored."""

    def __init__(self) -> None:
        self._buffer = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes | str) -> list[str]:
        self._buffer += chunk.decode("utf-8") if isinstance(chunk, bytes) else chunk
        self._buffer = self._buffer.replace("\r\n", "\n").replace("\r", "\n")
        events = []
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
        return events

    def close(self) -> list[str]:
        """The last event when the stream ended without its blank line."""
        events = self.feed("\n\n") if self._buffer or self._data else []
        return events


@dataclass(frozen=True)
class Event:
    """What one streamed event carries."""

    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    error: str | None = None
    status: int = 200  # the HTTP status of the response the event came in (an error response: its status)
    done: bool = False  # the `[DONE]` sentinel


def parse_event(data: str) -> Event:
    """One SSE `data` payload of a chat or text completion stream -> Event."""
    if data.strip() == "[DONE]":
        return Event(done=True)
    try:
        obj = json.loads(data)
    except json.JSONDecodeError:
        return Event(error=f"not JSON in the event stream: {data[:200]!r}")
    return _parse_object(obj)


def _parse_object(obj: Any) -> Event:
    if not isinstance(obj, dict):
        return Event(error=f"unexpected event {str(obj)[:200]!r}")
    if obj.get("error") is not None:
        return Event(error=error_message(obj))
    text, finish = "", None
    for choice in obj.get("choices") or ():
        delta = choice.get("delta")
        piece = (delta or {}).get("content") if delta is not None else (choice.get("text") or choice.get("message", {}).get("content"))
        text += piece or ""
        finish = choice.get("finish_reason") or finish
    usage = obj.get("usage") or {}
    return Event(text=text, finish_reason=finish, completion_tokens=usage.get("completion_tokens"),
                 prompt_tokens=usage.get("prompt_tokens"))


def error_message(obj: Any) -> str:
    """The message of an OpenAI-style error body ({"error": {"message": ...}}, {"error": "..."}, FastAPI's
    {"detail": ...}, or trtllm-serve's {"object": "error", "message": ...})."""
    if isinstance(obj, dict):
        error = obj.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or error)
        if error is not None:
            return str(error)
        for key in ("message", "detail"):
            if obj.get(key):
                return str(obj[key])
    return str(obj)[:500]


@dataclass(frozen=True)
class Sampling:
    """How one request samples: temperature 0 is greedy on every OpenAI-compatible server, None leaves it to
    the server; `min_tokens` (trtllm-serve and vLLM take it; plain OpenAI servers refuse it) and `seed` are
    sent only when set."""

    temperature: float | None = 0.0
    stop: tuple[str, ...] = ()
    min_tokens: int | None = None
    seed: int | None = None


GREEDY = Sampling()


def request_body(model: str | None, prompt: str, *, endpoint: Endpoint, max_tokens: int, stream: bool,
                 sampling: Sampling = GREEDY) -> dict[str, Any]:
    """The JSON body of one request."""
    temperature, stop, min_tokens, seed = sampling.temperature, sampling.stop, sampling.min_tokens, sampling.seed
    body: dict[str, Any] = {"max_tokens": max_tokens, "stream": stream}
    if model:
        body["model"] = model
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        body["stream_options"] = {"include_usage": True}
    if temperature is not None:
        body["temperature"] = temperature
    if stop:
        body["stop"] = list(stop)
    if min_tokens is not None:
        body["min_tokens"] = min_tokens
    if seed is not None:
        body["seed"] = seed
    return body


def lora_request(name: str, task_id: int, path: str | None) -> dict[str, Any]:
    """trtllm-serve's per-request adapter, the body extension `lora_request` (TensorRT-LLM 1.1.0's
    openai_completion_client_for_lora example, https://nvidia.github.io/TensorRT-LLM/1.1.0/examples/
    openai_completion_client_for_lora.html lines 17-27: lora_name, lora_int_id, lora_path; the server hands it to
    generate_async as a LoRARequest, whose lora_path must exist on the server). `model` stays the base model."""
    return {"lora_name": name, "lora_int_id": int(task_id), **({"lora_path": path} if path else {})}


@dataclass
class Completion:
    """One finished request, streamed or not."""

    text: str = ""
    chunks: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    status: int | None = None
    error: str | None = None
    ttft_s: float | None = None
    latency_s: float = 0.0


def _client_timeout(timeout_s: float | None):
    import aiohttp

    return aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s or 10.0, 10.0))


async def stream_events(session, base_url: str, body: dict[str, Any], *, endpoint: Endpoint) -> AsyncIterator[Event]:
    """POST one request; yield an Event per SSE event (or one Event for a whole JSON response). An HTTP error
    status yields one Event whose error is 'HTTP <status>: <message>'. Connection errors raise (aiohttp)."""
    async with session.post(base_url + ENDPOINT_PATHS[endpoint], json=body) as response:
        if response.status >= 400:
            raw = await response.text()
            try:
                message = error_message(json.loads(raw))
            except json.JSONDecodeError:
                message = raw.strip()[:500] or response.reason
            yield Event(error=f"HTTP {response.status}: {message}", status=response.status)
            return
        if not body.get("stream"):
            yield _parse_object(await response.json(content_type=None))
            return
        parser = SseParser()
        async for chunk in response.content.iter_any():
            for data in parser.feed(chunk):
                event = parse_event(data)
                yield event
                if event.done:
                    return
        for data in parser.close():
            yield parse_event(data)


async def complete(base_url: str, body: dict[str, Any], *, endpoint: Endpoint, timeout_s: float) -> Completion:
    """One request to the end (streamed or not); server and connection errors are in .error, never raised."""
    import aiohttp

    result = Completion()
    started = time.perf_counter()
    try:
        async with aiohttp.ClientSession(timeout=_client_timeout(timeout_s)) as session:
            async for event in stream_events(session, base_url, body, endpoint=endpoint):
                if event.error:
                    result.error, result.status = event.error, event.status
                    break
                if event.text:
                    if result.ttft_s is None:
                        result.ttft_s = time.perf_counter() - started
                    result.chunks.append(event.text)
                result.finish_reason = event.finish_reason or result.finish_reason
                result.completion_tokens = event.completion_tokens if event.completion_tokens is not None else result.completion_tokens
                result.prompt_tokens = event.prompt_tokens if event.prompt_tokens is not None else result.prompt_tokens
        result.status = result.status or 200
    except asyncio.TimeoutError:
        result.error = f"no complete answer from {base_url} within {timeout_s:.0f} s"
    except aiohttp.ClientError as error:
        result.error = f"cannot reach {base_url}: {type(error).__name__}: {error}"
    result.text = "".join(result.chunks)
    result.latency_s = time.perf_counter() - started
    return result


def generate(base_url: str, body: dict[str, Any], *, endpoint: Endpoint, timeout_s: float) -> Completion:
    """Blocking `complete` (its own event loop; safe to call from several threads at once)."""
    return asyncio.run(complete(base_url, body, endpoint=endpoint, timeout_s=timeout_s))


@dataclass(frozen=True)
class Probe:
    """GET /v1/models and /health: the served model ids, and /health's status (None: the server has none)."""

    models: tuple[str, ...]
    health: int | None
    model_cards: tuple[dict, ...] = ()


async def _probe(base_url: str, timeout_s: float) -> Probe:
    import aiohttp

    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    async with aiohttp.ClientSession(timeout=_client_timeout(timeout_s)) as session:
        async with session.get(base_url + "/models") as response:
            response.raise_for_status()
            cards = tuple(card for card in (await response.json(content_type=None)).get("data") or () if isinstance(card, dict))
        async with session.get(root + "/health") as response:
            health = None if response.status == 404 else response.status
    return Probe(models=tuple(str(card.get("id")) for card in cards), health=health, model_cards=cards)


def probe(base_url: str, timeout_s: float = 10.0) -> Probe:
    """Raises aiohttp.ClientError / asyncio.TimeoutError when the server does not answer."""
    return asyncio.run(_probe(base_url, timeout_s))


def context_limit(probe_result: Probe, model: str) -> int | None:
    """The context length a server advertises for `model` in /v1/models (vLLM: max_model_len), if any."""
    for card in probe_result.model_cards:
        if str(card.get("id")) == model:
            for key in ("max_model_len", "max_seq_len", "context_length"):
                if isinstance(card.get(key), int):
                    return int(card[key])
    return None

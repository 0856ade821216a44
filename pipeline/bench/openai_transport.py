"""One streamed request to an OpenAI-compatible server (trtllm-serve, transformers serve) over aiohttp.

Each request is a streamed chat completion (the server applies the chat template) or text completion, with
stream_options.include_usage. Every SSE event that carries text is one chunk (its time is the token's time);
the usage event is handed to the runner as pipeline.bench.transport.Usage, which is kept without a time
stamp. Output lengths are forced with `min_tokens` only where the server takes it (trtllm-serve and vLLM do;
`supports_min_tokens` asks once; transformers serve refuses unknown fields with HTTP 422).
"""

from __future__ import annotations

from typing import Any, AsyncIterator

from pipeline.bench.transport import Chunk, Usage
from pipeline.bench.workload import BenchRequest
from pipeline.clients.openai import Endpoint, Sampling, lora_request, request_body, stream_events


class OpenAITransport:
    """Streams requests through one shared aiohttp session (created on first use, inside the running loop)."""

    def __init__(self, base_url: str, model: str, *, endpoint: Endpoint = "chat", min_tokens: bool = False,
                 timeout_s: float | None = None) -> None:
        self.base_url = base_url
        self.model = model
        self.endpoint = endpoint
        self.min_tokens = min_tokens
        self.timeout_s = timeout_s
        self._session = None

    def _get_session(self):
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                                                  connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def body(self, request: BenchRequest) -> dict[str, Any]:
        body = request_body(self.model, request.prompt, endpoint=self.endpoint, max_tokens=request.max_tokens, stream=True,
                            sampling=Sampling(temperature=None, min_tokens=request.min_tokens if self.min_tokens else None))
        if request.lora_task_id is not None:
            body["lora_request"] = lora_request(request.adapter or str(request.lora_task_id), request.lora_task_id,
                                                request.lora_path)
        return body

    async def stream(self, request: BenchRequest) -> AsyncIterator[tuple[Any, Any]]:
        """(text, None) per text event, (Usage, None) for counts, (None, message) for an error."""
        async for event in stream_events(self._get_session(), self.base_url, self.body(request), endpoint=self.endpoint):
            if event.error:
                yield None, event.error
                return
            if event.text:
                yield event.text, None
            if event.completion_tokens is not None or event.prompt_tokens is not None:
                yield Usage(event.completion_tokens, event.prompt_tokens), None

    def decode(self, payload: Any) -> Chunk:
        return Chunk(text=payload)


def supports_min_tokens(base_url: str, model: str, endpoint: Endpoint, timeout_s: float = 120.0) -> tuple[bool, str]:
    """Whether the server takes `min_tokens` (one 1-token request): (answer, the server's message when not)."""
    from pipeline.clients.openai import generate

    body = request_body(model, "Hi", endpoint=endpoint, max_tokens=1, stream=False, sampling=Sampling(temperature=None, min_tokens=1))
    done = generate(base_url, body, endpoint=endpoint, timeout_s=timeout_s)
    return done.error is None, done.error or ""

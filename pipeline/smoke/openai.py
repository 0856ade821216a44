"""The smoke checks' requests over an OpenAI-compatible server (pipeline.clients.openai), as GenerateResults."""

from __future__ import annotations

from pathlib import Path

from pipeline.clients.triton import GenerateRequest, GenerateResult
from pipeline.clients.contract import Served

OPENAI_TOO_LONG_WAIT_S = 60.0  # a server that accepts the prompt shows it at once; one that refuses, at once too


def openai_call(served: Served, request: GenerateRequest, timeout_s: float, lora: dict | None = None) -> GenerateResult:
    """One request through the OpenAI API (temperature 0: greedy), as a GenerateResult; `lora`: trtllm-serve's
    lora_request body extension."""
    from pipeline.clients.openai import generate as openai_generate
    from pipeline.clients.openai import Sampling, request_body

    sampling = Sampling(temperature=0.0 if request.temperature is None else request.temperature, stop=request.stop_words)
    body = request_body(served.model, request.prompt, endpoint=served.endpoint, max_tokens=request.max_tokens,
                        stream=request.stream, sampling=sampling)
    if lora:
        body["lora_request"] = lora
    done = openai_generate(served.url, body, endpoint=served.endpoint, timeout_s=timeout_s)
    return GenerateResult(text=done.text, chunks=done.chunks, responses=len(done.chunks), output_tokens=done.completion_tokens,
                          ttft_s=done.ttft_s, latency_s=done.latency_s, error=done.error, finish_reason=done.finish_reason,
                          prompt_tokens=done.prompt_tokens)


def openai_live_ready(served: Served) -> tuple[bool, str]:
    from pipeline.clients.openai import probe

    found = probe(served.url)
    listed = served.model in found.models
    healthy = found.health in (None, 200)
    health = "no /health" if found.health is None else f"/health {found.health}"
    return listed and healthy, f"/v1/models lists {list(found.models)}; {health}; contract openai ({served.endpoint})"


def openai_metadata(served: Served, timeout_s: float) -> tuple[bool, str]:
    """The model answers a one-token request on the chosen endpoint and reports usage."""
    from pipeline.clients.openai import generate as openai_generate
    from pipeline.clients.openai import request_body

    done = openai_generate(served.url, request_body(served.model, "Hi", endpoint=served.endpoint, max_tokens=1, stream=False),
                           endpoint=served.endpoint, timeout_s=timeout_s)
    ok = done.error is None and done.completion_tokens is not None and done.prompt_tokens is not None
    return ok, (f"{served.endpoint} endpoint answers; usage: {done.prompt_tokens} prompt + {done.completion_tokens} "
                f"completion tokens" if done.error is None else f"error: {done.error}")


def openai_long_words(served: Served, default: int) -> int:
    """Words of a prompt over the model's context: the limit /v1/models gives, else max_position_embeddings
    in the model folder it names, plus 64; else `default`."""
    import json

    from pipeline.clients.openai import context_limit, probe

    limit = context_limit(probe(served.url), served.model)
    config = Path(served.model) / "config.json"
    if limit is None and config.is_file():
        limit = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    return int(limit) + 64 if limit else default


def openai_first_answer(served: Served, prompt: str, max_tokens: int) -> GenerateResult:
    """Stream the request and stop at the first event: an HTTP error (or an error event) is the answer; a
    text/role event means the server accepted the prompt. Disconnecting cancels the generation."""
    import asyncio

    import aiohttp

    from pipeline.clients.openai import request_body, stream_events

    async def first() -> GenerateResult:
        body = request_body(served.model, prompt, endpoint=served.endpoint, max_tokens=max_tokens, stream=True)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=OPENAI_TOO_LONG_WAIT_S)) as session:
            async for event in stream_events(session, served.url, body, endpoint=served.endpoint):
                if event.error:
                    return GenerateResult(error=event.error, status=event.status)
                return GenerateResult(text=event.text, status=200)
        return GenerateResult(status=200)

    try:
        return asyncio.run(first())
    except asyncio.TimeoutError:
        return GenerateResult(status=200, text=f"(no event within {OPENAI_TOO_LONG_WAIT_S:.0f} s)")

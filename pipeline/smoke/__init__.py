"""smoke: a release gate for a served model, through the same requests NVIDIA's clients send.

The server's contract is detected first (pipeline.clients.contract): Triton's ensemble/BLS tensors, Triton's LLM-API
model (text_input, streaming, sampling_param_*), or an OpenAI-compatible server (--url http(s)://HOST:PORT/v1,
chat completions by default; the server applies the chat template).

Checks, in order: live/ready; metadata of the served model; a greedy request returns text; streaming
gives >= 2 responses whose text equals the non-streamed text; max_tokens is respected (token count: the
ensemble's num_output_tokens, OpenAI's usage.completion_tokens, the LLM-API model's streamed responses; and
for both new contracts the short text is a prefix of the greedy text); a stop word stops generation; the other
front model (BLS vs ensemble) answers the same (ensemble contract only); 8 concurrent requests all complete;
a too-long prompt gets a clear error and the server is still ready after it. Over OpenAI "clear" means an
HTTP 4xx whose message names the length, and the too-long prompt is one the server's context cannot hold (the
limit /v1/models advertises, else max_position_embeddings of the model folder /v1/models names, else
--long-prompt-words words); it is streamed, so a server that accepts it (transformers serve checks no
length) is seen at its first event and disconnected, which cancels the generation.

The checks follow the mode the repository was rendered for (`is_decoupled`, from the served config):
decoupled models are exercised streamed; a `--no-decoupled` repository is exercised with whole
responses, and its streaming check becomes `streaming_refused`: stream=true gets an error that names the
decoupled transaction policy, and the server still answers afterwards.
Every check is a record (failures are data); `run_smoke` raises GateFailedError only through
`require_pass`, so callers can still print the report.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from pipeline.clients.triton import LLMAPI_INPUTS, LLMAPI_OUTPUTS, GenerateRequest, GenerateResult, generate
from pipeline.clients.contract import ENSEMBLE_INPUTS, TRITON_FRONT_MODELS, Served, detect
from pipeline.core.errors import GateFailedError, InvalidInputError, PipelineError
from pipeline.clients.openai import Endpoint

_LENGTH_WORDS = ("max_input_len", "max_seq_len", "too long", "exceeds", "longer than", "maximum context",
                 "context length", "max_num_tokens", "prompt length")
DEFAULT_LONG_PROMPT_WORDS = 20000
OPENAI_TOO_LONG_WAIT_S = 60.0  # a server that accepts the prompt shows it at once; one that refuses, at once too


class SmokeSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(description="Triton gRPC endpoint HOST:PORT, or an OpenAI base URL http(s)://HOST:PORT/v1")
    model: str | None = Field(None, description="Triton model (default: ensemble, else the LLM-API model) or OpenAI model id")
    endpoint: Endpoint = Field("chat", description="OpenAI only: /v1/chat/completions (chat template) or /v1/completions")
    prompt: str = "The capital of France is"
    max_tokens: int = Field(16, ge=2)
    short_max_tokens: int = Field(4, ge=1)
    concurrency: int = Field(8, ge=1)
    long_prompt_words: int | None = Field(None, ge=1, description="words in the too-long prompt (default: see run_smoke)")
    timeout_s: float = Field(180.0, gt=0)
    skip: tuple[str, ...] = Field((), description="checks not run (recorded as skipped)")
    report: Path | None = Field(None, description="also write the JSON report here")


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str
    seconds: float
    skipped: bool = False


class SmokeReport(BaseModel):
    url: str
    model: str
    passed: bool
    checks: list[CheckResult]
    decoupled: bool | None = None  # the served model's mode (None: the server was not reachable)
    prompt: str = ""
    answer: str | None = None  # the greedy check's text: what the model said to prompt
    contract: str | None = None  # triton-ensemble, triton-llmapi or openai (None: not reachable)


def run_smoke(spec: SmokeSpec) -> SmokeReport:
    state: dict = {}
    checks: list[CheckResult] = []
    started = time.perf_counter()
    try:
        served = detect(spec.url, spec.model, endpoint=spec.endpoint, timeout_s=min(spec.timeout_s, 30.0))
    except InvalidInputError:
        raise
    except PipelineError as error:  # the server does not answer: the live/ready check failed
        return _finish(spec, SmokeReport(url=spec.url, model=spec.model or "(not detected)", passed=False, prompt=spec.prompt,
                                         checks=[CheckResult(name="live_ready", passed=False, detail=error.message,
                                                             seconds=round(time.perf_counter() - started, 3))]))
    openai = served.kind == "openai"
    other = None
    if served.kind == "triton-ensemble" and served.model in TRITON_FRONT_MODELS:
        other = "tensorrt_llm_bls" if served.model == "ensemble" else "ensemble"

    def call(model: str = served.model, **options) -> GenerateResult:
        request = GenerateRequest(prompt=options.pop("prompt", spec.prompt), max_tokens=options.pop("max_tokens", spec.max_tokens),
                                  **options)
        if openai:
            return _openai_call(served, request, spec.timeout_s)
        llmapi = served.llmapi_options if model == served.model else None
        return generate(spec.url, model, request, timeout_s=spec.timeout_s, llmapi=llmapi)

    def live_ready() -> tuple[bool, str]:
        if openai:
            return _openai_live_ready(served, state)
        client = _client(spec.url)
        try:
            live, ready = client.is_server_live(), client.is_server_ready()
            model_ready = client.is_model_ready(served.model)
            if model_ready and served.decoupled is not None:
                state["decoupled"] = served.decoupled
        finally:
            client.close()
        return live and ready and model_ready, f"live={live} ready={ready} {served.model} ready={model_ready}" + (
            f", {'decoupled (streamed)' if state['decoupled'] else 'not decoupled (whole responses)'}"
            if "decoupled" in state else "") + f"; contract {served.kind}"

    def metadata() -> tuple[bool, str]:
        if openai:
            return _openai_metadata(served, spec.timeout_s)
        client = _client(spec.url)
        try:
            meta = client.get_model_metadata(served.model, as_json=True)
        finally:
            client.close()
        inputs = {t["name"] for t in meta.get("inputs", [])}
        outputs = {t["name"] for t in meta.get("outputs", [])}
        want_in, want_out = (ENSEMBLE_INPUTS, {"text_output"}) if served.kind == "triton-ensemble" else (LLMAPI_INPUTS, LLMAPI_OUTPUTS)
        missing = set(want_in) - inputs | (set(want_out) - outputs)
        return not missing, f"{len(inputs)} inputs, {len(outputs)} outputs" + (f"; missing {sorted(missing)}" if missing else "")

    def greedy() -> tuple[bool, str]:
        result = call()
        state["greedy"] = result
        return result.ok and bool(result.text.strip()), _describe(result)

    def streaming() -> tuple[bool, str]:
        result = call(stream=True)
        base = state.get("greedy")
        same = base is not None and result.text == base.text
        ok = result.ok and result.responses >= 2 and same
        return ok, f"{result.responses} responses; joined text {'equals' if same else 'differs from'} the non-streamed text" + (
            f" ({result.text!r} vs {base.text if base else None!r})" if not same else "") + (f"; error: {result.error}" if result.error else "")

    def streaming_refused() -> tuple[bool, str]:
        result = call(stream=True)
        clear = result.error is not None and "decoupled" in result.error
        after = call(max_tokens=spec.short_max_tokens)
        ok = clear and after.ok and bool(after.text)
        return ok, f"stream=true: {(result.error or 'accepted (no error)')[:200]}; afterwards a whole request " + (
            "succeeded" if after.ok else f"failed: {after.error}")

    def max_tokens() -> tuple[bool, str]:
        if served.kind != "triton-ensemble":
            return _max_tokens_counted(served, call(max_tokens=spec.short_max_tokens, stream=state["decoupled"]),
                                       state.get("greedy"), spec.short_max_tokens)
        result = call(max_tokens=spec.short_max_tokens, stream=state["decoupled"])
        count = result.output_tokens if result.output_tokens is not None else result.responses
        ok = result.ok and 1 <= count <= spec.short_max_tokens and result.responses <= spec.short_max_tokens
        if not state["decoupled"]:
            ok = ok and result.output_tokens is not None and result.responses == 1
        return ok, f"max_tokens={spec.short_max_tokens}: {count} tokens in {result.responses} responses" + (
            f"; error: {result.error}" if result.error else "")

    def stop_word() -> tuple[bool, str]:
        base = state.get("greedy")
        stop = _pick_stop_word(base.text if base else "")
        if stop is None:
            return False, f"no word to stop on in the greedy text {base.text if base else ''!r}"
        result = call(stop_words=(stop,))
        expected = base.text[: base.text.find(stop) + len(stop)]
        if served.kind != "triton-ensemble":  # OpenAI and the LLM API leave the stop string out by default
            cut = base.text[: base.text.find(stop)]
            ok = result.ok and result.text in (cut, expected) and len(result.text) < len(base.text)
            return ok, f"stop word {stop!r}: got {result.text!r}, expected {cut!r} (or {expected!r}, stop string kept)" + (
                f"; error: {result.error}" if result.error else "")
        ok = result.ok and result.text == expected and len(result.text) < len(base.text)
        return ok, f"stop word {stop!r}: got {result.text!r}, expected {expected!r}" + (f"; error: {result.error}" if result.error else "")

    def bls_equals_ensemble() -> tuple[bool, str]:
        result = call(model=other)
        base = state.get("greedy")
        ok = result.ok and base is not None and result.text == base.text
        return ok, f"{other}: {result.text!r}" + ("" if ok else f" vs {spec.model}: {base.text if base else None!r}") + (
            f"; error: {result.error}" if result.error else "")

    def concurrent() -> tuple[bool, str]:
        prompts = [f"{spec.prompt} (request {i})" if i % 2 else spec.prompt for i in range(spec.concurrency)]
        started = time.perf_counter()
        with ThreadPoolExecutor(spec.concurrency) as pool:
            results = list(pool.map(lambda p: call(prompt=p, stream=state["decoupled"]), prompts))
        wall = time.perf_counter() - started
        failed = [r.error for r in results if not r.ok or not r.text]
        tokens = sum((r.output_tokens or r.responses) for r in results)
        state["concurrent_tokens_per_s"] = tokens / wall if wall else 0.0
        return not failed, f"{len(results) - len(failed)}/{len(results)} completed, {tokens} tokens in {wall:.1f} s" + (
            f"; first error: {failed[0]}" if failed else "")

    def too_long() -> tuple[bool, str]:
        if openai:
            words = spec.long_prompt_words or _openai_long_words(served)
            result = _openai_first_answer(served, "hello " * words, spec.short_max_tokens)
            clear = result.error is not None and (result.status or 0) in range(400, 500) and any(
                word in result.error.lower() for word in _LENGTH_WORDS)
            if result.error is None:
                result.text = f"HTTP {result.status}, a {words}-word prompt was accepted"
        else:
            result = call(prompt="hello " * (spec.long_prompt_words or DEFAULT_LONG_PROMPT_WORDS), max_tokens=spec.short_max_tokens)
            clear = result.error is not None and any(word in result.error for word in _LENGTH_WORDS)
        ready_ok, ready_detail = live_ready()
        after = call(max_tokens=spec.short_max_tokens)
        ok = clear and ready_ok and after.ok and bool(after.text)
        refused = result.error or ("none: " + result.text if openai else "none (the request was accepted)")
        return ok, f"error: {refused[:200]}; afterwards {ready_detail}, a short request " + (
            "succeeded" if after.ok else f"failed: {after.error}")

    steps: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("live_ready", live_ready), ("metadata", metadata), ("greedy", greedy), ("streaming", streaming),
        ("max_tokens", max_tokens), ("stop_word", stop_word)]
    if other is not None:
        steps.append((f"{other}_equals_{served.model}", bls_equals_ensemble))
    steps += [(f"concurrent_{spec.concurrency}", concurrent), ("too_long_prompt", too_long)]
    for index, (name, step) in enumerate(steps):
        if name == "streaming" and state.get("decoupled") is False:
            name, step = "streaming_refused", streaming_refused
            steps[index] = (name, step)
        if name in spec.skip:
            checks.append(CheckResult(name=name, passed=False, skipped=True, detail="skipped (--skip)", seconds=0.0))
            continue
        started = time.perf_counter()
        try:
            passed, detail = step()
        except Exception as error:  # noqa: BLE001 - a failed check is a record, not a crash
            passed, detail = False, f"{type(error).__name__}: {error}"
        checks.append(CheckResult(name=name, passed=passed, detail=detail, seconds=round(time.perf_counter() - started, 3)))
        if name == "live_ready" and not passed:
            break
    greedy_result = state.get("greedy")
    report = SmokeReport(url=spec.url, model=served.model, checks=checks, decoupled=state.get("decoupled"),
                         passed=all(c.passed for c in checks if not c.skipped) and len(checks) == len(steps),
                         prompt=spec.prompt, contract=served.kind,
                         answer=greedy_result.text if greedy_result is not None and greedy_result.ok else None)
    return _finish(spec, report)


def _finish(spec: SmokeSpec, report: SmokeReport) -> SmokeReport:
    if spec.report:
        from pipeline.core.artifacts import write_json_atomic

        write_json_atomic(Path(spec.report), report.model_dump(mode="json"))
    return report


def _max_tokens_counted(served: Served, result: GenerateResult, base: GenerateResult | None, limit: int) -> tuple[bool, str]:
    """max_tokens over OpenAI (usage.completion_tokens) or the LLM-API model (its streamed responses, one per
    generation step; whole responses give no count): the count is within the limit, and the short greedy text
    is a prefix of the longer greedy one (so the server stopped early instead of answering something else)."""
    if result.output_tokens is not None:
        count, source = result.output_tokens, "usage.completion_tokens"
    elif result.responses > 1:
        count, source = result.responses, "streamed responses"
    else:
        count, source = None, "no count (whole response)"
    prefix = base is not None and base.ok and base.text.startswith(result.text) and len(result.text) < len(base.text)
    ok = result.ok and bool(result.text) and prefix and (count is None or 1 <= count <= limit) and (
        count is not None or result.finish_reason == "length")
    return ok, f"max_tokens={limit}: {count} tokens ({source}), finish_reason {result.finish_reason}, text {result.text!r} " + (
        "is a prefix of the greedy text" if prefix else f"is not a shorter prefix of {base.text if base else None!r}") + (
        f"; error: {result.error}" if result.error else "")


def _openai_call(served: Served, request: GenerateRequest, timeout_s: float) -> GenerateResult:
    """One request through the OpenAI API (temperature 0: greedy), as a GenerateResult."""
    from pipeline.clients.openai import generate as openai_generate
    from pipeline.clients.openai import Sampling, request_body

    sampling = Sampling(temperature=0.0 if request.temperature is None else request.temperature, stop=request.stop_words)
    body = request_body(served.model, request.prompt, endpoint=served.endpoint, max_tokens=request.max_tokens,
                        stream=request.stream, sampling=sampling)
    done = openai_generate(served.url, body, endpoint=served.endpoint, timeout_s=timeout_s)
    return GenerateResult(text=done.text, chunks=done.chunks, responses=len(done.chunks), output_tokens=done.completion_tokens,
                          ttft_s=done.ttft_s, latency_s=done.latency_s, error=done.error, finish_reason=done.finish_reason,
                          prompt_tokens=done.prompt_tokens)


def _openai_live_ready(served: Served, state: dict) -> tuple[bool, str]:
    from pipeline.clients.openai import probe

    found = probe(served.url)
    state.setdefault("decoupled", True)  # OpenAI servers stream on request
    listed = served.model in found.models
    healthy = found.health in (None, 200)
    health = "no /health" if found.health is None else f"/health {found.health}"
    return listed and healthy, f"/v1/models lists {list(found.models)}; {health}; contract openai ({served.endpoint})"


def _openai_metadata(served: Served, timeout_s: float) -> tuple[bool, str]:
    """The model answers a one-token request on the chosen endpoint and reports usage."""
    from pipeline.clients.openai import generate as openai_generate
    from pipeline.clients.openai import request_body

    done = openai_generate(served.url, request_body(served.model, "Hi", endpoint=served.endpoint, max_tokens=1, stream=False),
                           endpoint=served.endpoint, timeout_s=timeout_s)
    ok = done.error is None and done.completion_tokens is not None and done.prompt_tokens is not None
    return ok, (f"{served.endpoint} endpoint answers; usage: {done.prompt_tokens} prompt + {done.completion_tokens} "
                f"completion tokens" if done.error is None else f"error: {done.error}")


def _openai_long_words(served: Served) -> int:
    """Words of a prompt over the model's context: the limit /v1/models gives, else max_position_embeddings
    in the model folder it names, plus 64; else DEFAULT_LONG_PROMPT_WORDS."""
    import json

    from pipeline.clients.openai import context_limit, probe

    limit = context_limit(probe(served.url), served.model)
    config = Path(served.model) / "config.json"
    if limit is None and config.is_file():
        limit = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    return int(limit) + 64 if limit else DEFAULT_LONG_PROMPT_WORDS


def _openai_first_answer(served: Served, prompt: str, max_tokens: int) -> GenerateResult:
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


def require_pass(report: SmokeReport) -> None:
    if not report.passed:
        failed = [c.name for c in report.checks if not c.passed and not c.skipped] or ["server not live"]
        raise GateFailedError(f"Smoke failed against {report.url} ({report.model}): {', '.join(failed)}.",
                              hint="See the table (or --json) for each check's detail; the server log names model errors.")


def _client(url: str):
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url)


def _pick_stop_word(text: str) -> str | None:
    """A word of the text (with its leading space) after its first few characters, so the stop is visible."""
    words = text.split(" ")
    for index in range(1, len(words)):
        word = words[index].strip()
        if len(word) >= 2 and word.isalpha() and text.find(" " + word) > 0:
            return " " + word
    return None


def _describe(result: GenerateResult) -> str:
    if result.error:
        return f"error: {result.error}"
    return f"{result.text!r} ({result.output_tokens} tokens, {result.latency_s:.2f} s)"

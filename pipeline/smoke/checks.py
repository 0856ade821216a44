"""The smoke checks: each a function over one SmokeContext, declared with what it needs and what it
provides, so a `--skip` that starves a later check is refused before anything runs.

A check returns (passed, detail). What a check learns for later ones (the served mode, the greedy answer)
goes into named fields of the context; a check that needs a field names it in `needs`, and the check that
fills it names it in `provides`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from pipeline.clients.triton import LLMAPI_INPUTS, LLMAPI_OUTPUTS, GenerateRequest, GenerateResult, generate
from pipeline.clients.contract import ENSEMBLE_INPUTS, Served
from pipeline.core.errors import InvalidInputError
from pipeline.clients.openai import Endpoint, lora_request
from pipeline.smoke.openai import (openai_call, openai_first_answer, openai_live_ready, openai_long_words,
                                   openai_metadata)

_LENGTH_WORDS = ("max_input_len", "max_seq_len", "too long", "exceeds", "longer than", "maximum context",
                 "context length", "max_num_tokens", "prompt length")
DEFAULT_LONG_PROMPT_WORDS = 20000


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
    lora_task_id: int | None = Field(None, ge=1, description="an adapter the deployment serves: the lora check runs")
    lora_name: str | None = Field(None, description="OpenAI's lora_request.lora_name, the LLM-API model's lora_name "
                                  "(default: the task id)")
    lora_path: str | None = Field(None, description="OpenAI's lora_request.lora_path, the LLM-API model's lora_path: the "
                                  "adapter's folder on the server (the LLM-API model needs it)")


@dataclass
class SmokeContext:
    """What every check reads (the spec, the served model) and what checks hand to later ones."""

    spec: SmokeSpec
    served: Served
    other: str | None = None  # the other front model (BLS vs ensemble), ensemble contract only
    decoupled: bool | None = None  # provided by live_ready: the served model is ready and streams
    greedy: GenerateResult | None = None  # provided by greedy: the reference answer
    concurrent_tokens_per_s: float | None = None

    @property
    def openai(self) -> bool:
        return self.served.kind == "openai"

    def call(self, model: str | None = None, **options) -> GenerateResult:
        """One request to `model` (default: the served model) with the spec's prompt and max_tokens unless given."""
        spec, served = self.spec, self.served
        request = GenerateRequest(prompt=options.pop("prompt", spec.prompt),
                                  max_tokens=options.pop("max_tokens", spec.max_tokens), **options)
        if self.openai:
            lora = lora_request(spec.lora_name or str(request.lora_task_id), request.lora_task_id, spec.lora_path) \
                if request.lora_task_id else None
            return openai_call(served, request, spec.timeout_s, lora)
        model = served.model if model is None else model
        llmapi = served.llmapi_options if model == served.model else None
        if llmapi is not None and request.lora_task_id:
            request = replace(request, lora_name=spec.lora_name, lora_path=spec.lora_path)
        return generate(spec.url, model, request, timeout_s=spec.timeout_s, llmapi=llmapi)


@dataclass(frozen=True)
class Check:
    """One smoke check. `when` chooses, once `needs` are there, whether it applies to this server (the
    streaming check and its --no-decoupled form are two checks, one of which applies)."""

    name: str
    run: Callable[[SmokeContext], tuple[bool, str]]
    needs: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    when: Callable[[SmokeContext], bool] = field(default=lambda ctx: True)


def live_ready(ctx: SmokeContext) -> tuple[bool, str]:
    if ctx.openai:
        ok, detail = openai_live_ready(ctx.served)
        ctx.decoupled = True if ctx.decoupled is None else ctx.decoupled  # OpenAI servers stream on request
        return ok, detail
    from tritonclient.grpc import InferenceServerClient

    served = ctx.served
    client = InferenceServerClient(ctx.spec.url)
    try:
        live, ready = client.is_server_live(), client.is_server_ready()
        model_ready = client.is_model_ready(served.model)
        if model_ready and served.decoupled is not None:
            ctx.decoupled = served.decoupled
    finally:
        client.close()
    mode = "" if ctx.decoupled is None else (
        f", {'decoupled (streamed)' if ctx.decoupled else 'not decoupled (whole responses)'}")
    return (live and ready and model_ready,
            f"live={live} ready={ready} {served.model} ready={model_ready}{mode}; contract {served.kind}")


def metadata(ctx: SmokeContext) -> tuple[bool, str]:
    if ctx.openai:
        return openai_metadata(ctx.served, ctx.spec.timeout_s)
    from tritonclient.grpc import InferenceServerClient

    served = ctx.served
    client = InferenceServerClient(ctx.spec.url)
    try:
        meta = client.get_model_metadata(served.model, as_json=True)
    finally:
        client.close()
    inputs = {t["name"] for t in meta.get("inputs", [])}
    outputs = {t["name"] for t in meta.get("outputs", [])}
    want_in, want_out = ((ENSEMBLE_INPUTS, {"text_output"}) if served.kind == "triton-ensemble"
                         else (LLMAPI_INPUTS, LLMAPI_OUTPUTS))
    missing = set(want_in) - inputs | (set(want_out) - outputs)
    return not missing, f"{len(inputs)} inputs, {len(outputs)} outputs" + (f"; missing {sorted(missing)}" if missing else "")


def greedy(ctx: SmokeContext) -> tuple[bool, str]:
    result = ctx.call()
    ctx.greedy = result
    return result.ok and bool(result.text.strip()), _describe(result)


def streaming(ctx: SmokeContext) -> tuple[bool, str]:
    result, base = ctx.call(stream=True), ctx.greedy
    same = base is not None and result.text == base.text
    ok = result.ok and result.responses >= 2 and same
    return ok, f"{result.responses} responses; joined text {'equals' if same else 'differs from'} the non-streamed text" + (
        f" ({result.text!r} vs {base.text if base else None!r})" if not same else "") + _error(result)


def streaming_refused(ctx: SmokeContext) -> tuple[bool, str]:
    result = ctx.call(stream=True)
    clear = result.error is not None and "decoupled" in result.error
    after = ctx.call(max_tokens=ctx.spec.short_max_tokens)
    ok = clear and after.ok and bool(after.text)
    return ok, f"stream=true: {(result.error or 'accepted (no error)')[:200]}; afterwards a whole request " + (
        "succeeded" if after.ok else f"failed: {after.error}")


def max_tokens(ctx: SmokeContext) -> tuple[bool, str]:
    limit = ctx.spec.short_max_tokens
    result = ctx.call(max_tokens=limit, stream=ctx.decoupled)
    if ctx.served.kind != "triton-ensemble":
        return _max_tokens_counted(result, ctx.greedy, limit)
    count = result.output_tokens if result.output_tokens is not None else result.responses
    ok = result.ok and 1 <= count <= limit and result.responses <= limit
    if not ctx.decoupled:
        ok = ok and result.output_tokens is not None and result.responses == 1
    return ok, f"max_tokens={limit}: {count} tokens in {result.responses} responses" + _error(result)


def stop_word(ctx: SmokeContext) -> tuple[bool, str]:
    base = ctx.greedy
    stop = _pick_stop_word(base.text if base else "")
    if base is None or stop is None:
        return False, f"no word to stop on in the greedy text {base.text if base else ''!r}"
    result = ctx.call(stop_words=(stop,))
    expected = base.text[: base.text.find(stop) + len(stop)]
    if ctx.served.kind != "triton-ensemble":  # OpenAI and the LLM API leave the stop string out by default
        cut = base.text[: base.text.find(stop)]
        ok = result.ok and result.text in (cut, expected) and len(result.text) < len(base.text)
        return ok, f"stop word {stop!r}: got {result.text!r}, expected {cut!r} (or {expected!r}, stop string kept)" + _error(result)
    ok = result.ok and result.text == expected and len(result.text) < len(base.text)
    return ok, f"stop word {stop!r}: got {result.text!r}, expected {expected!r}" + _error(result)


def other_equals(ctx: SmokeContext) -> tuple[bool, str]:
    result, base = ctx.call(model=ctx.other), ctx.greedy
    ok = result.ok and base is not None and result.text == base.text
    return ok, f"{ctx.other}: {result.text!r}" + ("" if ok else f" vs {ctx.served.model}: {base.text if base else None!r}") + (
        _error(result))


def concurrent(ctx: SmokeContext) -> tuple[bool, str]:
    spec = ctx.spec
    prompts = [f"{spec.prompt} (request {i})" if i % 2 else spec.prompt for i in range(spec.concurrency)]
    started = time.perf_counter()
    with ThreadPoolExecutor(spec.concurrency) as pool:
        results = list(pool.map(lambda p: ctx.call(prompt=p, stream=ctx.decoupled), prompts))
    wall = time.perf_counter() - started
    failed = [r.error for r in results if not r.ok or not r.text]
    tokens = sum((r.output_tokens or r.responses) for r in results)
    ctx.concurrent_tokens_per_s = tokens / wall if wall else 0.0
    return not failed, f"{len(results) - len(failed)}/{len(results)} completed, {tokens} tokens in {wall:.1f} s" + (
        f"; first error: {failed[0]}" if failed else "")


def too_long(ctx: SmokeContext) -> tuple[bool, str]:
    spec, served = ctx.spec, ctx.served
    if ctx.openai:
        words = spec.long_prompt_words or openai_long_words(served, DEFAULT_LONG_PROMPT_WORDS)
        result = openai_first_answer(served, "hello " * words, spec.short_max_tokens)
        clear = result.error is not None and (result.status or 0) in range(400, 500) and any(
            word in result.error.lower() for word in _LENGTH_WORDS)
        if result.error is None:
            result.text = f"HTTP {result.status}, a {words}-word prompt was accepted"
    else:
        result = ctx.call(prompt="hello " * (spec.long_prompt_words or DEFAULT_LONG_PROMPT_WORDS),
                          max_tokens=spec.short_max_tokens)
        clear = result.error is not None and any(word in result.error for word in _LENGTH_WORDS)
    ready_ok, ready_detail = live_ready(ctx)
    after = ctx.call(max_tokens=spec.short_max_tokens)
    ok = clear and ready_ok and after.ok and bool(after.text)
    refused = result.error or ("none: " + result.text if ctx.openai else "none (the request was accepted)")
    return ok, f"error: {refused[:200]}; afterwards {ready_detail}, a short request " + (
        "succeeded" if after.ok else f"failed: {after.error}")


def lora(ctx: SmokeContext) -> tuple[bool, str]:
    """A request with the adapter answers and differs from the base answer; a base request after it is unchanged
    (the adapter did not leak into the base model or its cache)."""
    adapted = ctx.call(lora_task_id=ctx.spec.lora_task_id)
    after = ctx.call()
    base = ctx.greedy.text if ctx.greedy else None
    if not adapted.ok:
        return False, f"task {ctx.spec.lora_task_id}: {_error(adapted)}"
    differs, unchanged = adapted.text != base, after.ok and after.text == base
    return differs and unchanged, (f"task {ctx.spec.lora_task_id}: {adapted.text[:60]!r} "
                                   f"({'differs from' if differs else 'SAME AS'} base); base afterwards "
                                   f"{'unchanged' if unchanged else 'CHANGED: ' + repr(after.text[:60])}")


def plan_checks(spec: SmokeSpec, served: Served, other: str | None) -> list[Check]:
    """The checks for this server, in order. Only the other-contract checks need the greedy answer for
    max_tokens (the short text must be a prefix of it); the ensemble's count comes from num_output_tokens."""
    counted = () if served.kind == "triton-ensemble" else ("greedy",)
    checks = [
        Check("live_ready", live_ready, provides=("decoupled",)),
        Check("metadata", metadata),
        Check("greedy", greedy, provides=("greedy",)),
        Check("streaming", streaming, needs=("decoupled", "greedy"), when=lambda ctx: ctx.decoupled is not False),
        Check("streaming_refused", streaming_refused, needs=("decoupled",), when=lambda ctx: ctx.decoupled is False),
        Check("max_tokens", max_tokens, needs=("decoupled", *counted)),
        Check("stop_word", stop_word, needs=("greedy",)),
    ]
    if other is not None:
        checks.append(Check(f"{other}_equals_{served.model}", other_equals, needs=("greedy",)))
    checks += [Check(f"concurrent_{spec.concurrency}", concurrent, needs=("decoupled",)),
               Check("too_long_prompt", too_long)]
    if spec.lora_task_id is not None:
        if served.kind == "triton-llmapi" and not spec.lora_path:
            raise InvalidInputError("--lora-task-id on the LLM-API model: it takes lora_id, lora_name and lora_path together, "
                                    "and --lora-path (the adapter's folder on the server) is missing.",
                                    hint="e.g. pipeline smoke --url H:8001 --lora-task-id 1 --lora-name sql --lora-path /models/lora/sql")
        checks.insert(3, Check("lora", lora, needs=("greedy",)))
    return checks


def refuse_bad_skips(checks: list[Check], skip: tuple[str, ...]) -> None:
    """InvalidInputError (exit 2) for a --skip that names no check, that leaves a check without what a
    skipped one provides, or that leaves nothing to check."""
    names = [c.name for c in checks]
    unknown = [name for name in skip if name not in names]
    if unknown:
        raise InvalidInputError(f"--skip names no smoke check of this server: {', '.join(unknown)}.",
                                hint=f"Its checks: {', '.join(names)}.")
    provider = {what: c.name for c in checks for what in c.provides}
    gone = {what: name for what, name in provider.items() if name in skip}
    starved = {c.name: [what for what in c.needs if what in gone] for c in checks if c.name not in skip}
    starved = {name: needs for name, needs in starved.items() if needs}
    if starved:
        skipped = sorted({gone[what] for needs in starved.values() for what in needs})
        raise InvalidInputError(
            f"--skip {', '.join(skipped)} leaves checks without what they need: " + "; ".join(
                f"{name!r} needs {', '.join(f'{what} (from {gone[what]})' for what in needs)}"
                for name, needs in starved.items()) + ".",
            hint=f"Also skip {', '.join(starved)}, or do not skip {', '.join(skipped)}.")
    if not [c for c in checks if c.name not in skip]:
        raise InvalidInputError("--skip leaves no smoke check to run: a run that checks nothing cannot pass.",
                                hint="Skip fewer checks.")


def _max_tokens_counted(result: GenerateResult, base: GenerateResult | None, limit: int) -> tuple[bool, str]:
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
        _error(result))


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


def _error(result: GenerateResult) -> str:
    return f"; error: {result.error}" if result.error else ""

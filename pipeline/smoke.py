"""smoke: a release gate for a served repository, through the same tensors NVIDIA clients send.

Checks, in order: live/ready; metadata of the served model; a greedy request returns text; streaming
gives >= 2 responses whose text equals the non-streamed text; max_tokens is respected (token count);
a stop word stops generation; the other front model (BLS vs ensemble) answers the same; 8 concurrent
requests all complete; a too-long prompt gets a clear error and the server is still ready after it.

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
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.client import GenerateRequest, GenerateResult, generate, is_decoupled
from pipeline.errors import GateFailedError, InvalidInputError

FrontModel = Literal["ensemble", "tensorrt_llm_bls"]
_LENGTH_WORDS = ("max_input_len", "max_seq_len", "too long", "exceeds", "longer than")


class SmokeSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(description="Triton gRPC endpoint HOST:PORT")
    model: FrontModel = "ensemble"
    prompt: str = "The capital of France is"
    max_tokens: int = Field(16, ge=2)
    short_max_tokens: int = Field(4, ge=1)
    concurrency: int = Field(8, ge=1)
    long_prompt_words: int = Field(20000, ge=1, description="words in the too-long prompt")
    timeout_s: float = Field(180.0, gt=0)
    report: Path | None = Field(None, description="also write the JSON report here")


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str
    seconds: float


class SmokeReport(BaseModel):
    url: str
    model: str
    passed: bool
    checks: list[CheckResult]
    decoupled: bool | None = None  # the served model's mode (None: the server was not reachable)
    prompt: str = ""
    answer: str | None = None  # the greedy check's text: what the model said to prompt


def run_smoke(spec: SmokeSpec) -> SmokeReport:
    if ":" not in spec.url:
        raise InvalidInputError(f"--url {spec.url!r} is not HOST:PORT.", hint="e.g. --url localhost:8001 (the gRPC port).")
    other: FrontModel = "tensorrt_llm_bls" if spec.model == "ensemble" else "ensemble"
    state: dict = {}
    checks: list[CheckResult] = []

    def call(model: str = spec.model, **options) -> GenerateResult:
        request = GenerateRequest(prompt=options.pop("prompt", spec.prompt), max_tokens=options.pop("max_tokens", spec.max_tokens),
                                  **options)
        return generate(spec.url, model, request, timeout_s=spec.timeout_s)

    def live_ready() -> tuple[bool, str]:
        client = _client(spec.url)
        try:
            live, ready = client.is_server_live(), client.is_server_ready()
            model_ready = client.is_model_ready(spec.model)
            if model_ready and "decoupled" not in state:
                state["decoupled"] = is_decoupled(client, spec.model)
        finally:
            client.close()
        return live and ready and model_ready, f"live={live} ready={ready} {spec.model} ready={model_ready}" + (
            f", {'decoupled (streamed)' if state['decoupled'] else 'not decoupled (whole responses)'}"
            if "decoupled" in state else "")

    def metadata() -> tuple[bool, str]:
        client = _client(spec.url)
        try:
            meta = client.get_model_metadata(spec.model, as_json=True)
        finally:
            client.close()
        inputs = {t["name"] for t in meta.get("inputs", [])}
        outputs = {t["name"] for t in meta.get("outputs", [])}
        missing = {"text_input", "max_tokens", "stream"} - inputs | ({"text_output"} - outputs)
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
        result = call(prompt="hello " * spec.long_prompt_words, max_tokens=spec.short_max_tokens)
        clear = result.error is not None and any(word in result.error for word in _LENGTH_WORDS)
        ready_ok, ready_detail = live_ready()
        after = call(max_tokens=spec.short_max_tokens)
        ok = clear and ready_ok and after.ok and bool(after.text)
        return ok, f"error: {(result.error or 'none (the request was accepted)')[:200]}; afterwards {ready_detail}, a short request " + (
            "succeeded" if after.ok else f"failed: {after.error}")

    steps: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("live_ready", live_ready), ("metadata", metadata), ("greedy", greedy), ("streaming", streaming),
        ("max_tokens", max_tokens), ("stop_word", stop_word), (f"{other}_equals_{spec.model}", bls_equals_ensemble),
        (f"concurrent_{spec.concurrency}", concurrent), ("too_long_prompt", too_long),
    ]
    for index, (name, step) in enumerate(steps):
        if name == "streaming" and state.get("decoupled") is False:
            name, step = "streaming_refused", streaming_refused
            steps[index] = (name, step)
        started = time.perf_counter()
        try:
            passed, detail = step()
        except Exception as error:  # noqa: BLE001 - a failed check is a record, not a crash
            passed, detail = False, f"{type(error).__name__}: {error}"
        checks.append(CheckResult(name=name, passed=passed, detail=detail, seconds=round(time.perf_counter() - started, 3)))
        if name == "live_ready" and not passed:
            break
    greedy_result = state.get("greedy")
    report = SmokeReport(url=spec.url, model=spec.model, passed=all(c.passed for c in checks) and len(checks) == len(steps),
                         checks=checks, decoupled=state.get("decoupled"), prompt=spec.prompt,
                         answer=greedy_result.text if greedy_result is not None and greedy_result.ok else None)
    if spec.report:
        from pipeline.artifacts import write_json_atomic

        write_json_atomic(Path(spec.report), report.model_dump(mode="json"))
    return report


def require_pass(report: SmokeReport) -> None:
    if not report.passed:
        failed = [c.name for c in report.checks if not c.passed] or ["server not live"]
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

"""smoke: a release gate for a served model, through the same requests NVIDIA's clients send.

The server's contract is detected first (pipeline.clients.contract): Triton's ensemble/BLS tensors, Triton's LLM-API
model (text_input, streaming, sampling_param_*), or an OpenAI-compatible server (--url http(s)://HOST:PORT/v1,
chat completions by default; the server applies the chat template).

Checks, in order: live/ready; metadata of the served model; a greedy request returns text; streaming
gives >= 2 responses whose text equals the non-streamed text; max_tokens is respected (token count: the
ensemble's num_output_tokens, OpenAI's usage.completion_tokens, the LLM-API model's streamed responses; and
for both new contracts the short text is a prefix of the greedy text); a stop word stops generation; the other
front model (BLS vs ensemble) answers the same (ensemble contract only); 8 concurrent requests all complete;
a too-long prompt gets a clear error and the server is still ready after it. With --lora-task-id N (a deployment
with adapters) the lora check runs after greedy: a request with the adapter answers and differs from the base answer,
and a base request after it is unchanged. Over OpenAI "clear" means an
HTTP 4xx whose message names the length, and the too-long prompt is one the server's context cannot hold (the
limit /v1/models advertises, else max_position_embeddings of the model folder /v1/models names, else
--long-prompt-words words); it is streamed, so a server that accepts it (transformers serve checks no
length) is seen at its first event and disconnected, which cancels the generation.

The checks follow the mode the repository was rendered for (`is_decoupled`, from the served config):
decoupled models are exercised streamed; a `--no-decoupled` repository is exercised with whole
responses, and its streaming check becomes `streaming_refused`: stream=true gets an error that names the
decoupled transaction policy, and the server still answers afterwards.
Every check is a record (failures are data); `run_smoke` raises GateFailedError only through
`require_pass`, so callers can still print the report. The checks themselves are in pipeline.smoke.checks,
each declaring what it needs from an earlier one: a `--skip` that would leave a check without it, one that
names no check, or one that leaves nothing to check is refused (InvalidInputError, exit 2) before any runs.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel

from pipeline.clients.contract import TRITON_FRONT_MODELS, detect
from pipeline.core.errors import GateFailedError, InvalidInputError, PipelineError
from pipeline.smoke.checks import SmokeContext, SmokeSpec, plan_checks, refuse_bad_skips

__all__ = ["CheckResult", "SmokeReport", "SmokeSpec", "require_pass", "run_smoke"]


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
    started = time.perf_counter()
    try:
        served = detect(spec.url, spec.model, endpoint=spec.endpoint, timeout_s=min(spec.timeout_s, 30.0))
    except InvalidInputError:
        raise
    except PipelineError as error:  # the server does not answer: the live/ready check failed
        return _finish(spec, SmokeReport(url=spec.url, model=spec.model or "(not detected)", passed=False, prompt=spec.prompt,
                                         checks=[CheckResult(name="live_ready", passed=False, detail=error.message,
                                                             seconds=round(time.perf_counter() - started, 3))]))
    other = None
    if served.kind == "triton-ensemble" and served.model in TRITON_FRONT_MODELS:
        other = "tensorrt_llm_bls" if served.model == "ensemble" else "ensemble"
    plan = plan_checks(spec, served, other)
    refuse_bad_skips(plan, spec.skip)
    ctx = SmokeContext(spec=spec, served=served, other=other)
    checks: list[CheckResult] = []
    finished = True
    for check in plan:
        if not check.when(ctx):
            continue
        if check.name in spec.skip:
            checks.append(CheckResult(name=check.name, passed=False, skipped=True, detail="skipped (--skip)", seconds=0.0))
            continue
        started = time.perf_counter()
        try:
            passed, detail = check.run(ctx)
        except Exception as error:  # noqa: BLE001 - a failed check is a record, not a crash
            passed, detail = False, f"{type(error).__name__}: {error}"
        checks.append(CheckResult(name=check.name, passed=passed, detail=detail, seconds=round(time.perf_counter() - started, 3)))
        if check.name == "live_ready" and not passed:
            finished = False
            break
    ran = [c for c in checks if not c.skipped]
    report = SmokeReport(url=spec.url, model=served.model, checks=checks, decoupled=ctx.decoupled,
                         passed=finished and bool(ran) and all(c.passed for c in ran),
                         prompt=spec.prompt, contract=served.kind,
                         answer=ctx.greedy.text if ctx.greedy is not None and ctx.greedy.ok else None)
    return _finish(spec, report)


def _finish(spec: SmokeSpec, report: SmokeReport) -> SmokeReport:
    if spec.report:
        from pipeline.core.artifacts import write_json_atomic

        write_json_atomic(Path(spec.report), report.model_dump(mode="json"))
    return report


def require_pass(report: SmokeReport) -> None:
    if not report.passed:
        failed = [c.name for c in report.checks if not c.passed and not c.skipped] or ["server not live"]
        raise GateFailedError(f"Smoke failed against {report.url} ({report.model}): {', '.join(failed)}.",
                              hint="See the table (or --json) for each check's detail; the server log names model errors.")

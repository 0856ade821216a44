"""A started tritonserver's readiness, load failures and warm-up.

- `wait_ready` polls /v2/health/ready and fails fast when the process exits: a port another process holds
  is InvalidInputError, anything else StageFailedError naming each model that failed to load with its log
  line (`load_failures`, `repository_index`), or the log's last lines.
- `warm_up` sends a few short requests so the first user request does not pay for lazy set-up.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipeline.core.errors import InvalidInputError, StageFailedError

if TYPE_CHECKING:
    from pipeline.serve.commands import TritonArgs

class StartedTriton(Protocol):
    """What readiness and warm-up read of a started tritonserver (pipeline.serve.TritonServer has it)."""

    spec: TritonArgs
    process: subprocess.Popen
    log_file: Path

    @property
    def http_url(self) -> str: ...

    @property
    def grpc_url(self) -> str: ...

    def alive(self) -> bool: ...

    def log_tail(self, lines: int = ...) -> str: ...


# ---------------------------------------------------------------------------------------------
# Readiness and load failures
# ---------------------------------------------------------------------------------------------

_LOAD_FAILED = re.compile(r"failed to load '([^']+)'(?: version \d+)?: (.*)")
_TABLE_ROW = re.compile(r"^\|\s*([^|\s]+)\s*\|\s*(\d+)\s*\|\s*(UNAVAILABLE[^|]*)\|", re.M)
_PORT_BUSY = re.compile(r"(already in use|Address in use|address already in use)", re.I)


def _http_get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (local URL)
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return 0


def repository_index(http_url: str) -> list[dict]:
    """POST /v2/repository/index: every model with its state and reason."""
    request = urllib.request.Request(f"http://{http_url}/v2/repository/index", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, json.JSONDecodeError):
        return []


def _first_line(text: str, limit: int = 400) -> str:
    """Triton quotes Python tracebacks with literal \\n: keep the message, drop the 'At:' frames."""
    text = text.split("\\n\\nAt:")[0].split("\\n")[0].strip().rstrip('"')
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_failures(log_text: str) -> dict[str, str]:
    """Failing model -> the log line that says why, from a tritonserver log (tracebacks cut)."""
    failures: dict[str, str] = {}
    for line in log_text.splitlines():
        match = _LOAD_FAILED.search(line)
        if match:
            failures.setdefault(match.group(1), _first_line(line.strip()))
    for match in _TABLE_ROW.finditer(log_text):
        failures.setdefault(match.group(1), _first_line(match.group(0).strip()))
    return failures


def _failure_error(server: StartedTriton, what: str) -> StageFailedError:
    log_text = server.log_file.read_text(encoding="utf-8", errors="replace") if server.log_file.is_file() else ""
    failures = load_failures(log_text)
    for entry in repository_index(server.http_url) if server.alive() else []:
        state = entry.get("state", "")
        if state and state != "READY":
            failures.setdefault(entry.get("name", "?"), f"{state}: {entry.get('reason', '')}".strip())
    if failures:
        lines = "\n".join(f"  {name}: {line}" for name, line in failures.items())
        names = ", ".join(failures)
        return StageFailedError(
            f"{what}: model(s) {names} failed to load.\n{lines}",
            hint=f"Fix the model named above; the full server log is {server.log_file}.",
        )
    return StageFailedError(
        f"{what}. Last lines of the server log:\n{server.log_tail(25)}",
        hint=f"The full server log is {server.log_file}.",
    )


def wait_ready(server: StartedTriton, timeout_s: float) -> None:
    """Poll /v2/health/ready until 200; fail fast when the process exits."""
    deadline = time.monotonic() + timeout_s
    url = f"http://{server.http_url}/v2/health/ready"
    while True:
        code = server.process.poll()
        if code is not None:
            log_text = server.log_tail(200)
            if _PORT_BUSY.search(log_text) and not load_failures(log_text):
                line = next((l for l in log_text.splitlines() if _PORT_BUSY.search(l)), "")
                raise InvalidInputError(f"tritonserver could not bind its ports: {line.strip()}",
                                        hint="Pick free ports (0 picks one) or stop the other server.")
            raise _failure_error(server, f"tritonserver exited with code {code} before it was ready")
        if _http_get(url) == 200:
            return
        if time.monotonic() > deadline:
            raise _failure_error(server, f"tritonserver was not ready after {timeout_s:g} s")
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# Warm-up
# ---------------------------------------------------------------------------------------------


def _warmup_target(client) -> tuple[str, object] | None:
    """The first ready model that takes text_input, max_tokens and stream (ensemble and BLS first)."""
    from pipeline.clients.contract import ENSEMBLE_INPUTS, TRITON_FRONT_MODELS

    index = [m.name for m in client.get_model_repository_index().models if m.state == "READY"]
    ordered = [n for n in TRITON_FRONT_MODELS if n in index] + sorted(n for n in index if n not in TRITON_FRONT_MODELS)
    for name in ordered:
        config = client.get_model_config(name).config
        inputs = {i.name for i in config.input}
        if ENSEMBLE_INPUTS <= inputs and config.max_batch_size > 0:
            return name, config
    return None


def warm_up(server: StartedTriton, requests: int = 2, max_tokens: int = 4, timeout_s: float = 120.0) -> str | None:
    """Send a few short requests so the first user request does not pay for lazy set-up: streamed when
    the repository was rendered decoupled, whole otherwise (a --no-decoupled model refuses stream=true).
    An LLM-API repository is warmed up through its own contract (pipeline.clients.llmapi).

    Returns the model warmed up (None when the repository has no text model). A failing warm-up
    request is a StageFailedError: a server that cannot answer is not ready.
    """
    import tritonclient.grpc as grpcclient

    from pipeline.clients.triton import GenerateRequest, generate, is_decoupled
    from pipeline.clients import llmapi as serve_llmapi

    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        if serve_llmapi.is_llmapi_repo(server.spec.repo):  # NVIDIA's LLM-API contract: text_input, sampling_param_*
            decoupled = client.get_model_config(serve_llmapi.MODEL).config.model_transaction_policy.decoupled
            return serve_llmapi.warm_up(server.grpc_url, decoupled, requests=requests, max_tokens=max_tokens,
                                        timeout_s=timeout_s)
        target = _warmup_target(client)
        stream = target is not None and is_decoupled(client, target[0])
    finally:
        client.close()
    if target is None:
        return None
    name, config = target
    names = {i.name for i in config.input}
    request = GenerateRequest(prompt="Hello, warm-up.", max_tokens=max_tokens, stream=stream and "stream" in names,
                              exclude_input_in_output=True if "exclude_input_in_output" in names else None,
                              return_num_output_tokens="return_num_output_tokens" in names)
    for _ in range(requests):
        answer = generate(server.grpc_url, name, request, timeout_s=timeout_s)
        if answer.error is not None:
            raise StageFailedError(f"Warm-up request to {name!r} failed: {answer.error}",
                                   hint=f"See the server log {server.log_file}.")
    return name

"""Serve a Triton model repository: find `tritonserver`, start it, wait until it is ready, stop it.

`tritonserver` comes from PATH (the NGC image) or from the `nvidia-pytriton` wheel, which ships the
server, its bundled libraries and a Python-backend stub per Python version. The wheel's backends
folder is copied once into a private cache with the stub for the running Python beside it, so the
site-packages copy is never modified and several servers can start at once.

World size > 1 (the `tensorrtllm` runtime, one rank per GPU) runs under `mpirun` the way
tensorrtllm_backend's `launch_triton_server.py` does: rank 0 loads the whole repository, every other
rank loads only the `tensorrt_llm` model(s) in explicit model-control mode.

No orphans: the server runs in its own process group (stop() ends the whole group) and is tied to the
process that started it by the parent-death signal (pipeline.processes.spawn), so a `kill -9` of that
process takes tritonserver down, and its Python stubs exit when they see tritonserver gone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.commands import TRITON_EXIT_TIMEOUT_S, mpirun_command, tritonserver_command
from pipeline.errors import InvalidInputError, StageFailedError, ToolMissingError, UnsupportedError
from pipeline.host import detect_gpu_key
from pipeline.paths import build_root
from pipeline.processes import ServerProcess, spawn

WARMUP_MODELS: tuple[str, ...] = ("ensemble", "tensorrt_llm_bls")
STOP_MARGIN_S = 10.0  # beyond the exit timeout before stop() kills the process group


class ServerSpec(BaseModel):
    """What to serve and how. Port 0 means: pick a free port."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo: Path
    http_port: int = Field(0, ge=0, le=65535)
    grpc_port: int = Field(0, ge=0, le=65535)
    metrics_port: int = Field(0, ge=0, le=65535)
    log_file: Path | None = None
    ready_timeout_s: float = Field(300.0, gt=0)
    world_size: int = Field(1, ge=1)
    warmup: bool = True
    exit_timeout_s: int = Field(TRITON_EXIT_TIMEOUT_S, ge=0, description=(
        "--exit-timeout-secs: how long a stopping server waits for in-flight requests and model unloads. "
        "A cancelled ensemble stream stays in flight in Triton 2.51 (README, Cancellation), so a stop after "
        "one takes this long."))
    extra_args: tuple[str, ...] = ()

    @field_validator("repo")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return Path(value).expanduser().resolve()


@dataclass(frozen=True)
class TritonBinary:
    """A runnable tritonserver: the executable, its backends folder (None: the binary's default)
    and the environment additions it needs."""

    path: Path
    backend_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    source: str = "PATH"


# ---------------------------------------------------------------------------------------------
# Finding the binary
# ---------------------------------------------------------------------------------------------


def find_tritonserver() -> TritonBinary:
    """`tritonserver` on PATH, else the one inside the nvidia-pytriton wheel (prepared to run here)."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonBinary(path=Path(on_path), source="PATH")
    try:
        import pytriton  # noqa: F401  (only to locate the wheel)
    except ImportError as error:
        raise ToolMissingError(
            "No tritonserver found: it is not on PATH and the nvidia-pytriton wheel is not installed.",
            hint="Run inside the NGC image (nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3) "
            "or `pip install nvidia-pytriton` (make install does).",
        ) from error
    dist = Path(pytriton.__file__).resolve().parent / "tritonserver"
    binary = dist / "bin" / "tritonserver"
    libs = dist.parent.parent / "nvidia_pytriton.libs"
    if not binary.is_file():
        raise ToolMissingError(f"The nvidia-pytriton wheel has no server binary at {binary}.",
                               hint="Reinstall nvidia-pytriton (0.7.x) or put tritonserver on PATH.")
    backend_dir = _private_backends(dist)
    library_path = [str(libs)]
    python_lib = _python_libdir()
    if python_lib:  # before the system's: the stub must run the same libpython as this interpreter
        library_path.insert(0, python_lib)
    env = {
        "LD_LIBRARY_PATH": _join_path(":".join(library_path), os.environ.get("LD_LIBRARY_PATH", "")),
        # the Python-backend stub embeds an interpreter: it must import from this environment
        "PATH": _join_path(str(Path(sys.executable).parent), os.environ.get("PATH", "")),
    }
    return TritonBinary(path=binary, backend_dir=backend_dir, env=env, source="nvidia-pytriton")


def _python_libdir() -> str | None:
    """The folder holding this interpreter's shared libpython, when it has one.

    The stub links libpython<major.minor>.so.1.0 by name; if the loader finds another build of the
    same minor version first (a distribution package beside a pyenv/conda Python), extension
    modules of this interpreter's stdlib fail with undefined symbols (e.g. _ssl: _PyModule_Add).
    """
    import sysconfig

    libdir = sysconfig.get_config_var("LIBDIR")
    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    if libdir and (Path(libdir) / name).is_file():
        return libdir
    return None


def _join_path(first: str, rest: str) -> str:
    return f"{first}:{rest}" if rest else first


def cache_dir() -> Path:
    base = os.environ.get("PIPELINE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trtllm-pipeline")
    return Path(base)


def _private_backends(dist: Path) -> Path:
    """A copy of the wheel's backends folder with the stub for this Python in backends/python/."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise UnsupportedError(
            f"nvidia-pytriton has no Python-backend stub for Python {version} ({stub} is missing).",
            hint="Use a Python version the wheel ships stubs for (3.8-3.13) or the NGC image.",
        )
    source = dist / "backends"
    key = f"{version}-{int(source.stat().st_mtime)}-{stub.stat().st_size}"
    target = cache_dir() / "triton-backends" / key
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(stub, tmp / "python" / "triton_python_backend_stub")
    try:
        os.replace(tmp, target)
    except OSError:  # another process won the race: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now (bind port 0 and let the kernel pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False


def resolve_ports(spec: ServerSpec) -> ServerSpec:
    """Fill ports given as 0 with free ones; refuse ports that are taken (exit 2)."""
    chosen: dict[str, int] = {}
    for name in ("http_port", "grpc_port", "metrics_port"):
        port = getattr(spec, name)
        if port and port_in_use(port):
            raise InvalidInputError(
                f"Port {port} (--{name.replace('_', '-')}) is already in use on this machine.",
                hint=f"Stop what listens there (`ss -ltnp 'sport = :{port}'`) or pick another port; "
                "0 picks a free one.",
            )
    taken = {spec.http_port, spec.grpc_port, spec.metrics_port} - {0}
    if len(taken) < len([p for p in (spec.http_port, spec.grpc_port, spec.metrics_port) if p]):
        raise InvalidInputError("The HTTP, gRPC and metrics ports must differ.", hint="Give three different ports or 0.")
    for name in ("http_port", "grpc_port", "metrics_port"):
        if getattr(spec, name) == 0:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            chosen[name] = port
    return spec.model_copy(update=chosen) if chosen else spec


# ---------------------------------------------------------------------------------------------
# The running server
# ---------------------------------------------------------------------------------------------


class TritonServer(ServerProcess):
    """A started tritonserver (own process group). Use as a context manager, or call stop(): SIGTERM (Triton
    waits up to its exit timeout for in-flight requests and unloads the models), then SIGKILL for the whole
    process group after the exit timeout plus a margin."""

    def __init__(self, spec: ServerSpec, process: subprocess.Popen, log_file: Path, command: list[str]) -> None:
        super().__init__(process, log_file, command)
        self.spec = spec

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.spec.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.spec.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.spec.metrics_port}/metrics"

    def stop_timeout_s(self) -> float:
        return self.spec.exit_timeout_s + STOP_MARGIN_S


def default_log_file() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return build_root() / "logs" / f"tritonserver-{stamp}-{os.getpid()}-{uuid.uuid4().hex[:4]}.log"


def check_repo(spec: ServerSpec) -> None:
    repo = spec.repo
    if not repo.is_dir():
        raise InvalidInputError(f"Model repository {repo} does not exist.",
                                hint="Render one with `pipeline render`, or pass the folder that holds the model folders.")
    models = [p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file()]
    if not models:
        raise InvalidInputError(f"{repo} holds no model folder with a config.pbtxt.",
                                hint="Pass the repository root (the folder that contains ensemble/, tensorrt_llm/, ...).")
    from pipeline.bundle import check_location

    check_location(repo)  # a bundle's configs name files under the root it was rendered for
    if spec.world_size > 1:
        config = repo / "tensorrt_llm" / "config.pbtxt"
        backend = _backend_of(config) if config.is_file() else None
        if backend != "tensorrtllm":
            raise UnsupportedError(
                f"--world-size {spec.world_size} needs the tensorrtllm runtime (one rank per GPU); "
                f"{repo} has tensorrt_llm backend {backend or 'none'}.",
                hint="The reference runtime runs in one process: use --world-size 1, or render the repository "
                "for the tensorrtllm runtime from a TP/PP engine.",
            )


def check_engine(repo: Path) -> None:
    """Refuse a repository whose TensorRT engine cannot run here (pipeline.profiles.check_engine_compatible):
    built by another TensorRT-LLM version, or for another GPU architecture, or no GPU at all. Only when
    tensorrt_llm's gpt_model_path is an engine folder on this machine; a path inside a container or a
    reference-runtime repository is left to the backend."""
    config = repo / "tensorrt_llm" / "config.pbtxt"
    if not config.is_file() or _backend_of(config) != "tensorrtllm":
        return
    match = re.search(r'key:\s*"gpt_model_path"\s*value:\s*\{\s*string_value:\s*"([^"]+)"', config.read_text(encoding="utf-8"))
    engine = Path(match.group(1)) if match else None
    if engine is None or not (engine / "config.json").is_file():
        return
    from pipeline.profiles import check_engine_compatible

    try:
        gpu = detect_gpu_key()  # NVML or nvidia-smi: milliseconds; "cpu" when there is no GPU
    except UnsupportedError:
        gpu = None  # a GPU missing from the table: the version check only
    check_engine_compatible(engine, gpu_key=gpu)


def _backend_of(config: Path) -> str | None:
    match = re.search(r'^\s*backend\s*:\s*"([^"]+)"', config.read_text(encoding="utf-8"), re.M)
    return match.group(1) if match else None


def start_server(spec: ServerSpec, *, binary: TritonBinary | None = None) -> TritonServer:
    """Start tritonserver for spec.repo, wait until it is ready (and warmed up), and return it.

    Raises InvalidInputError (bad repo, port in use), ToolMissingError (no tritonserver / mpirun),
    StageFailedError (a model failed to load, the server died, or it was not ready in time; the
    message names the model and quotes the log line).
    """
    check_repo(spec)
    check_engine(spec.repo)
    spec = resolve_ports(spec)
    if binary is None:
        binary = find_tritonserver()
    if spec.world_size > 1:
        mpirun = shutil.which("mpirun")
        if not mpirun:
            raise ToolMissingError("--world-size > 1 runs one rank per GPU through mpirun, which is not installed here.",
                                   hint="Serve from the NGC TensorRT-LLM Triton image, which ships OpenMPI.")
        command = mpirun_command(spec, binary, mpirun=mpirun)
    else:
        command = tritonserver_command(spec, binary)
    log_file = Path(spec.log_file).resolve() if spec.log_file else default_log_file()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **binary.env}
    started = time.monotonic()
    with open(log_file, "wb") as log:
        log.write(("# " + " ".join(command) + "\n").encode())
        log.flush()
        # Tied to this process: if it dies (even by kill -9), the kernel kills tritonserver, whose Python
        # stubs then exit on their own. mpirun gets SIGTERM instead, which it forwards to its ranks.
        process = spawn(command, death_signal=signal.SIGTERM if spec.world_size > 1 else signal.SIGKILL,
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                        start_new_session=True)
    server = TritonServer(spec, process, log_file, command)
    try:
        wait_ready(server, spec.ready_timeout_s)
        if spec.warmup:
            warm_up(server)
    except BaseException:
        server.stop(timeout_s=10)
        raise
    server.ready_s = time.monotonic() - started
    return server


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


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


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


def _failure_error(server: TritonServer, what: str) -> StageFailedError:
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


def wait_ready(server: TritonServer, timeout_s: float) -> None:
    """Poll /v2/health/ready until 200; fail fast when the process exits."""
    deadline = time.monotonic() + timeout_s
    url = f"http://{server.http_url}/v2/health/ready"
    while True:
        code = server.process.poll()
        if code is not None:
            log_text = _tail(server.log_file, 200)
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
    index = [m.name for m in client.get_model_repository_index().models if m.state == "READY"]
    ordered = [n for n in WARMUP_MODELS if n in index] + sorted(n for n in index if n not in WARMUP_MODELS)
    for name in ordered:
        config = client.get_model_config(name).config
        inputs = {i.name for i in config.input}
        if {"text_input", "max_tokens", "stream"} <= inputs and config.max_batch_size > 0:
            return name, config
    return None


def warm_up(server: TritonServer, requests: int = 2, max_tokens: int = 4, timeout_s: float = 120.0) -> str | None:
    """Send a few short requests so the first user request does not pay for lazy set-up: streamed when
    the repository was rendered decoupled, whole otherwise (a --no-decoupled model refuses stream=true).
    An LLM-API repository is warmed up through its own contract (pipeline.serve_llmapi).

    Returns the model warmed up (None when the repository has no text model). A failing warm-up
    request is a StageFailedError: a server that cannot answer is not ready.
    """
    import tritonclient.grpc as grpcclient

    from pipeline.client import GenerateRequest, generate, is_decoupled
    from pipeline import serve_llmapi

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

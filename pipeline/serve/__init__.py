"""Serve a Triton model repository: check it, pick its ports, start `tritonserver`, wait until it is ready, stop it.

The binary comes from pipeline.serve.triton_binary (PATH or the nvidia-pytriton wheel); readiness, load failures
and warm-up from pipeline.serve.health.

World size > 1 (the `tensorrtllm` runtime, one rank per GPU) runs under `mpirun` the way
tensorrtllm_backend's `launch_triton_server.py` does: rank 0 loads the whole repository, every other
rank loads only the `tensorrt_llm` model(s) in explicit model-control mode.

No orphans: the server runs in its own process group (stop() ends the whole group) and is tied to the
process that started it by the parent-death signal (pipeline.core.processes.spawn), so a `kill -9` of that
process takes tritonserver down. Its Python stubs may not follow on their own (pipeline.core.reaper says
why): each server gets a shm-region prefix of its own (`new_shm_region_prefix`), which is in every
stub's command line and every region's name, and a reaper that SIGKILLs what is left and unlinks the
regions however the server ends, `kill -9` of its owner included (pipeline.core.processes.ServerProcess).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.serve.commands import TRITON_EXIT_TIMEOUT_S, mpirun_command, tritonserver_command
from pipeline.core.artifacts import read_manifest
from pipeline.core.errors import InvalidInputError, StageFailedError, ToolMissingError, UnsupportedError
from pipeline.core.host import known_gpu_key
from pipeline.core.paths import new_log_file
from pipeline.core.processes import ServerProcess, spawn_logged
from pipeline.serve.health import wait_ready, warm_up
from pipeline.core.tool_env import nvidia_environment, pipeline_environment
from pipeline.serve.triton_binary import TritonBinary, find_tritonserver

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
    shm_region_prefix: str | None = Field(None, pattern=r"^[A-Za-z0-9_]{16,}$", description=(
        "The Python backend's /dev/shm region prefix; None: start_server gives the server one of its own, "
        "by which its reaper knows the server's regions and stubs (pipeline.core.reaper)."))

    @field_validator("repo")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return Path(value).expanduser().resolve()


# ---------------------------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now (bind port 0 and let the kernel pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    """Whether something listens on port. The probe binds with SO_REUSEADDR, as tritonserver's own servers
    do (HTTP and metrics: libevhtp, triton-inference-server/third_party@6f855c0
    libevhtp/libevhtp/evhtp.c:4024, htp__serv_setsockopts_; gRPC: grpc's tcp_server_utils_posix_common.cc
    prepare_socket sets it on every TCP listener), so connections of a stopped server left in TIME_WAIT
    do not count: tritonserver binds such a port fine. Only a real listener makes the bind fail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return True
    return False


def refuse_busy_port(port: int, option: str) -> None:
    """InvalidInputError (exit 2) when the port the user asked for (not 0) is taken."""
    if port and port_in_use(port):
        raise InvalidInputError(
            f"Port {port} ({option}) is already in use on this machine.",
            hint=f"Stop what listens there (`ss -ltnp 'sport = :{port}'`) or pick another port; 0 picks a free one.",
        )


def resolve_ports(spec: ServerSpec) -> ServerSpec:
    """Fill ports given as 0 with free ones; refuse ports that are taken (exit 2)."""
    chosen: dict[str, int] = {}
    for name in ("http_port", "grpc_port", "metrics_port"):
        refuse_busy_port(getattr(spec, name), f"--{name.replace('_', '-')}")
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
        super().__init__(process, log_file, command, token=spec.shm_region_prefix)
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


def new_shm_region_prefix() -> str:
    """A Python-backend shm-region prefix no other server has: Triton's default name, then ours and a random part."""
    return f"triton_python_backend_shm_region_pipeline_{secrets.token_hex(6)}_"


def check_repo(spec: ServerSpec) -> None:
    repo = spec.repo
    if not repo.is_dir():
        raise InvalidInputError(f"Model repository {repo} does not exist.",
                                hint="Render one with `pipeline render`, or pass the folder that holds the model folders.")
    models = [p.name for p in repo.iterdir() if (p / "config.pbtxt").is_file()]
    if not models:
        raise InvalidInputError(f"{repo} holds no model folder with a config.pbtxt.",
                                hint="Pass the repository root (the folder that contains ensemble/, tensorrt_llm/, ...).")
    from pipeline.render.bundle import check_location

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
    """Refuse a repository whose TensorRT engine cannot run here (pipeline.build.profiles.check_engine_compatible):
    built by another TensorRT-LLM version, or for another GPU architecture, or no GPU at all. Only when
    tensorrt_llm's gpt_model_path is an engine folder on this machine; a path inside a container or a
    reference-runtime repository is left to the backend. A config.pbtxt that does not parse, or a
    tensorrtllm one without gpt_model_path, is refused (InvalidInputError), never skipped."""
    config_path = repo / "tensorrt_llm" / "config.pbtxt"
    if not config_path.is_file():
        return
    config = _model_config(config_path)
    if config.backend != "tensorrtllm":
        return
    value = config.parameters["gpt_model_path"].string_value if "gpt_model_path" in config.parameters else ""
    if not value:
        raise InvalidInputError(f"{config_path} (backend tensorrtllm) sets no gpt_model_path parameter.",
                                hint="Render the repository again with `pipeline render`; the backend needs the engine folder.")
    engine = Path(value)
    if not (engine / "config.json").is_file():
        return
    from pipeline.build.profiles import check_engine_compatible

    # NVML or nvidia-smi: milliseconds; a GPU missing from the table (None) gets the version check only
    check_engine_compatible(engine, gpu_key=known_gpu_key())


def _model_config(path: Path):
    """The Triton ModelConfig of a config.pbtxt; one that does not parse is an InvalidInputError."""
    from pipeline.render.model_repo import parse_model_config

    try:
        return parse_model_config(path)
    except StageFailedError as error:
        raise InvalidInputError(str(error), hint="Fix that config.pbtxt, or render the repository again "
                                "with `pipeline render`.") from error


def _backend_of(config: Path) -> str | None:
    return _model_config(config).backend or None


def needs_pipeline(repo: Path) -> bool:
    """Whether the repository's models import the pipeline: its tensorrt_llm model is the CPU reference runtime
    (render's manifest says runtime reference; a repository without one is read for the import)."""
    manifest = read_manifest(repo)
    runtime = manifest.get("runtime") if isinstance(manifest, dict) else None
    if runtime is not None:
        return runtime == "reference"
    return any("pipeline.reference_runtime" in model.read_text(encoding="utf-8", errors="replace")
               for model in repo.glob("*/1/model.py"))


def server_environment(repo: Path, binary: TritonBinary) -> dict[str, str]:
    """tritonserver's environment. The nvidia-pytriton server runs the stub built for this interpreter, so all of
    it runs in the pipeline's environment. NVIDIA's server (on PATH: the image) runs its Python models under the
    image's python3 and TensorRT-LLM's packages, without the pipeline's virtual environment, unless the
    repository is the reference runtime's, which imports the pipeline (pipeline.core.tool_env)."""
    if binary.source != "PATH":
        return {**os.environ, **binary.env}
    base = pipeline_environment() if needs_pipeline(repo) else nvidia_environment()
    return {**base, **binary.env, **deployable_env(repo)}


def deployable_env(repo: Path) -> dict[str, str]:
    """What an LLM-API repository's deployable asks of the process that runs TensorRT-LLM (its manifest's env, e.g.
    TRTLLM_LOAD_KV_SCALES=1 for calibrated FP8 KV scales); nothing for other repositories."""
    manifest = read_manifest(repo / "tensorrt_llm" / "1")
    env = manifest.get("env") if isinstance(manifest, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def start_server(spec: ServerSpec, *, binary: TritonBinary | None = None) -> TritonServer:
    """Start tritonserver for spec.repo, wait until it is ready (and warmed up), and return it.

    Raises InvalidInputError (bad repo, port in use), ToolMissingError (no tritonserver / mpirun),
    StageFailedError (a model failed to load, the server died, or it was not ready in time; the
    message names the model and quotes the log line).
    """
    check_repo(spec)
    check_engine(spec.repo)
    spec = resolve_ports(spec)
    if spec.shm_region_prefix is None:
        spec = spec.model_copy(update={"shm_region_prefix": new_shm_region_prefix()})
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
    log_file = Path(spec.log_file).resolve() if spec.log_file else new_log_file("tritonserver")
    env = server_environment(spec.repo, binary)
    started = time.monotonic()
    # Tied to this process: if it dies (even by kill -9), the kernel kills tritonserver (mpirun gets SIGTERM
    # instead, which it forwards to its ranks), and the server's reaper kills the stubs and removes their regions.
    process = spawn_logged(command, log_file, env=env, death_signal=signal.SIGTERM if spec.world_size > 1 else signal.SIGKILL)
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

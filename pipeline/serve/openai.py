"""`pipeline serve --api openai DEPLOYABLE`: an OpenAI-compatible server for a PyTorch-backend deployable.

Which server:
  - a GPU deployable where `trtllm-serve` is installed (the NGC image): TensorRT-LLM's own server on the
    deployable's model/ with its LLM-API options (pipeline.serve.commands.trtllm_serve_command, as 1.1.0's
    CLI reference spells `trtllm-serve serve`: MODEL, --host, --port, --backend pytorch,
    --tp_size, --pp_size, --extra_llm_api_options);
  - a deployable built with `--gpu cpu`, or any unquantized deployable on a machine with no GPU:
    `transformers serve --continuous-batching` pinned to model/ (FORCE_MODEL, transformers 5.24's CLI), on
    the CPU in float32, its paged KV cache sized from the options (kv_cache_config.tokens_per_block ->
    --cb-block-size, max_num_tokens -> --cb-max-batch-tokens, kv_cache_config.max_tokens -> --cb-num-blocks).
    It needs the extra `transformers[serving]` (fastapi, uvicorn, openai, ...);
  - such a deployable that carries LoRA adapters (`pipeline build ... --lora`, its manifest's "lora"): our own
    server over the reference runtime instead (pipeline/serve/openai_reference.py), which honours trtllm-serve's
    per-request `lora_request` and mixes adapters in one batch (transformers serve does neither);
  - a GPU deployable where trtllm-serve is missing and a GPU is present: refused (ToolMissingError) with the
    command to run where it is installed.

The model answers under the name /v1/models gives (every server: the model/ path it was started with).
Lifecycle as for tritonserver (pipeline/serve/__init__.py): own process group, tied to this process by the
parent-death signal (pipeline.core.processes.spawn), SIGTERM then SIGKILL for the group on stop, ready when
GET /health and GET /v1/models answer 200, a log file, ports checked before the start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.core.deployable import Deployable
from pipeline.core.errors import InvalidInputError, StageFailedError, ToolMissingError
from pipeline.core.paths import new_log_file
from pipeline.core.processes import ServerProcess, spawn_logged
from pipeline.core.tool_env import nvidia_environment

Engine = Literal["trtllm-serve", "transformers", "reference"]
SERVING_MODULES = ("fastapi", "uvicorn", "openai")  # transformers[serving], as `transformers serve` checks them
STOP_TIMEOUT_S = 30.0


class OpenAISpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    deployable: Path
    host: str = "127.0.0.1"
    http_port: int = Field(8000, ge=0, le=65535, description="0: a free port")
    log_file: Path | None = None
    ready_timeout_s: float = Field(600.0, gt=0)
    warmup: bool = True
    stop_timeout_s: float = Field(STOP_TIMEOUT_S, ge=0)


def transformers_serve_command(deployable: Deployable, host: str, port: int, *, binary: str = "transformers") -> list[str]:
    """`transformers serve` (5.24) pinned to the deployable's model/ on the CPU, continuous batching on."""
    options = deployable.options
    kv = options.get("kv_cache_config") or {}
    command = [binary, "serve", str(deployable.model_dir), "--continuous-batching", "--device", "cpu",
               "--dtype", "float32", "--host", host, "--port", str(port), "--log-level", "info"]
    block = int(kv.get("tokens_per_block") or 32)
    command += ["--cb-block-size", str(block)]
    if options.get("max_num_tokens"):
        command += ["--cb-max-batch-tokens", str(int(options["max_num_tokens"]))]
    if kv.get("max_tokens"):
        command += ["--cb-num-blocks", str(-(-int(kv["max_tokens"]) // block))]
    return command


def trtllm_command(deployable: Deployable, host: str, port: int) -> list[str]:
    from pipeline.serve.commands import trtllm_serve_command

    options = deployable.options
    return trtllm_serve_command(deployable.model_dir, deployable.options_path, host, port,
                                tp_size=int(options.get("tensor_parallel_size") or 1),
                                pp_size=int(options.get("pipeline_parallel_size") or 1))


def choose_engine(deployable: Deployable) -> Engine:
    """trtllm-serve for a GPU deployable where it is installed; transformers for a CPU deployable, or an
    unquantized one on a machine without GPUs; otherwise refused with the command to run elsewhere."""
    if deployable.is_cpu:
        return _cpu_engine(deployable)
    if shutil.which("trtllm-serve"):
        return "trtllm-serve"
    from pipeline.core.host import known_gpu_key

    gpu = known_gpu_key() or "unknown"
    command = " ".join(trtllm_command(deployable, "0.0.0.0", 8000))
    quantized = (deployable.model_dir / "hf_quant_config.json").is_file()
    if gpu == "cpu" and not quantized:
        return _cpu_engine(deployable)
    raise ToolMissingError(
        f"{deployable.path} is a GPU deployable and trtllm-serve is not installed here"
        + (" (and its ModelOpt-quantized weights do not load in transformers on the CPU)." if quantized else "."),
        hint=f"Run it where TensorRT-LLM 1.1 is installed (the NGC image nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3): "
        f"`{command}`; or build a CPU deployable (`pipeline build --backend pytorch --gpu cpu`).")


def _cpu_engine(deployable: Deployable) -> Engine:
    """The reference runtime's own server for a deployable with adapters, else transformers serve."""
    return "reference" if (deployable.manifest.get("lora") or {}).get("task_ids") else "transformers"


def _transformers_binary() -> str:
    import importlib.util

    missing = [name for name in SERVING_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ToolMissingError(f"`transformers serve` needs {', '.join(missing)}, which are not installed.",
                               hint="pip install 'transformers[serving]' (fastapi, uvicorn, openai, ...) into this environment.")
    beside = Path(sys.executable).parent / "transformers"
    found = str(beside) if beside.is_file() else shutil.which("transformers")
    if not found:
        raise ToolMissingError("The `transformers` command is not installed beside this Python nor on PATH.",
                               hint="pip install 'transformers[serving]'.")
    return found


class OpenAIServer(ServerProcess):
    """A started OpenAI-compatible server (own process group). Context manager, or call stop(): SIGTERM (uvicorn
    finishes in-flight responses; trtllm-serve shuts its LLM down), then SIGKILL for the group."""

    def __init__(self, spec: OpenAISpec, engine: Engine, process: subprocess.Popen, log_file: Path, command: list[str],
                 port: int) -> None:
        super().__init__(process, log_file, command)
        self.spec, self.engine, self.port = spec, engine, port
        self.model: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """What OpenAI clients take as base_url (`pipeline smoke --url`)."""
        return f"{self.base_url}/v1"

    def stop_timeout_s(self) -> float:
        return self.spec.stop_timeout_s


def start_openai_server(spec: OpenAISpec, deployable: Deployable, *, engine: Engine | None = None) -> OpenAIServer:
    """Start the server for a deployable (pipeline.core.deployable.read_deployable), wait until /health and
    /v1/models answer, send a warm-up chat completion, and return it. InvalidInputError for a port in
    use, ToolMissingError for a missing server, StageFailedError (with the log tail) when it dies or is late."""
    from pipeline.serve import free_port, refuse_busy_port

    engine = engine or choose_engine(deployable)
    refuse_busy_port(spec.http_port, "--http-port")
    port = spec.http_port or free_port()
    if engine == "transformers":
        command = transformers_serve_command(deployable, spec.host, port, binary=_transformers_binary())
    elif engine == "reference":
        from pipeline.serve.openai_reference import reference_command

        command = reference_command(deployable, spec.host, port)
    else:
        command = trtllm_command(deployable, spec.host, port)
    log_file = Path(spec.log_file).resolve() if spec.log_file else new_log_file(engine)
    # trtllm-serve is NVIDIA's: the image's python3 and TensorRT-LLM's packages, not the pipeline's venv, plus what
    # the deployable asks of it (TRTLLM_LOAD_KV_SCALES)
    if engine == "trtllm-serve":
        env = {**nvidia_environment(), **deployable.env, "PYTHONUNBUFFERED": "1"}
    else:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    # trtllm-serve starts MPI workers and ends them on SIGTERM; transformers serve and ours are one process
    process = spawn_logged(command, log_file, env=env, death_signal=signal.SIGTERM if engine == "trtllm-serve" else signal.SIGKILL)
    server = OpenAIServer(spec, engine, process, log_file, command, port)
    try:
        server.model = wait_ready(server, spec.ready_timeout_s)
        if spec.warmup:
            warm_up(server)
    except BaseException:
        server.stop(timeout_s=10)
        raise
    server.ready_s = time.monotonic() - started
    return server


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (local URL)
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except (urllib.error.URLError, OSError):
        return 0, b""


def wait_ready(server: OpenAIServer, timeout_s: float) -> str:
    """Poll /health, then /v1/models, until both answer 200; returns the served model's id."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = server.process.poll()
        if code is not None:
            tail = server.log_tail(25)
            if "address already in use" in tail.lower():
                raise InvalidInputError(f"{server.engine} could not bind port {server.port}.",
                                        hint="Pick a free port (0 picks one) or stop the other server.")
            raise StageFailedError(f"{server.engine} exited with code {code} before it was ready. Last log lines:\n{tail}",
                                   hint=f"The full log is {server.log_file}.")
        if _get(f"{server.base_url}/health")[0] == 200:
            status, body = _get(f"{server.base_url}/v1/models", timeout=10)
            if status == 200:
                models = [m.get("id") for m in json.loads(body or b"{}").get("data", [])]
                if models:
                    return str(models[0])
        if time.monotonic() > deadline:
            raise StageFailedError(f"{server.engine} was not ready after {timeout_s:g} s. Last log lines:\n"
                                   f"{server.log_tail(25)}", hint=f"The full log is {server.log_file}.")
        time.sleep(0.5)


def warm_up(server: OpenAIServer, max_tokens: int = 2) -> None:
    """One short whole chat completion, so the first user request does not pay for lazy set-up; an error or an
    answer without text or finish reason fails the start."""
    from pipeline.clients.openai import Sampling, generate, request_body

    body = request_body(server.model, "Hello, warm-up.", endpoint="chat", max_tokens=max_tokens, stream=False,
                        sampling=Sampling(temperature=None))
    answer = generate(server.url, body, endpoint="chat", timeout_s=120.0)
    if answer.error:
        raise StageFailedError(f"Warm-up chat completion to {server.engine} failed: {answer.error}",
                               hint=f"See the server log {server.log_file}.")
    if not answer.text and answer.finish_reason is None:
        raise StageFailedError(f"Warm-up chat completion to {server.engine} returned no answer.",
                               hint=f"See the server log {server.log_file}.")


def check_api(api: str, path: Path) -> None:
    """Refuse (exit 2) a folder the chosen API cannot serve, naming what would: a Triton repository with
    --api openai, a deployable folder with --api triton."""
    from pipeline.core.artifacts import read_manifest
    from pipeline.render.llmapi import looks_like_deployable

    path = Path(path).expanduser().resolve()
    is_repository = any(path.glob("*/config.pbtxt"))
    if api == "openai" and is_repository:
        source = ((read_manifest(path) or {}).get("inputs") or {}).get("spec", {}).get("engine")
        raise InvalidInputError(
            f"--api openai serves a PyTorch-backend deployable; {path} is a Triton model repository.",
            hint="Serve it with --api triton (the default)" + (
                f", or serve the deployable it was rendered from: `pipeline serve --api openai {source}`." if source
                else ", or pass a deployable folder (build/<model>/engines/<profile-id>/ from "
                "`pipeline build --backend pytorch`)."))
    if api == "triton" and not is_repository and looks_like_deployable(path):
        raise InvalidInputError(
            f"{path} is a PyTorch-backend deployable, not a Triton model repository.",
            hint=f"Serve it with `pipeline serve --api openai {path}`, or render its Triton LLM-API repository first: "
            f"`pipeline render --engine {path}`, then `pipeline serve <repository>`.")

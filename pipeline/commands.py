"""Command lines of the servers the pipeline starts, for every caller that starts them.

- `tritonserver` on one model repository (`tritonserver_command`), or one rank per GPU under `mpirun`
  (`mpirun_command`, as tensorrtllm_backend's launch_triton_server.py): `pipeline serve` runs them here,
  `pipeline k8s render` writes them into the pods with the pod's ports and /models.
- `trtllm-serve` on a PyTorch-backend deployable (`trtllm_serve_command`), spelled as the pinned
  release's option table says (pipeline/trtllm_serve.py): `pipeline serve --api openai` on a GPU and the
  pods of `pipeline k8s render --api openai`.

Pure functions of their arguments: nothing here finds binaries, resolves ports or starts processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from pipeline.trtllm_serve import BINARY, DEFAULT_PORT, SOURCE_COMMIT, SUBCOMMAND, flags

TRTLLM_MODEL_NAMES: tuple[str, ...] = ("tensorrt_llm",)
TRITON_EXIT_TIMEOUT_S = 30  # tritonserver's own --exit-timeout-secs default
TRTLLM_SERVE_BACKEND = "pytorch"


class TritonArgs(Protocol):
    """What a tritonserver command line needs (pipeline.serve.ServerSpec has it; so has TritonLaunch)."""

    repo: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    world_size: int
    exit_timeout_s: int
    extra_args: tuple[str, ...]


@dataclass(frozen=True)
class TritonLaunch:
    """TritonArgs for a server started elsewhere (a pod): ports as given, nothing resolved."""

    repo: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    world_size: int = 1
    exit_timeout_s: int = TRITON_EXIT_TIMEOUT_S
    extra_args: tuple[str, ...] = ()


class _Binary(Protocol):
    path: Path
    backend_dir: Path | None


def _binary_path(binary: _Binary | str | Path) -> tuple[str, Path | None]:
    if isinstance(binary, (str, Path)):
        return str(binary), None
    return str(binary.path), binary.backend_dir


def _port_args(spec: TritonArgs) -> list[str]:
    return [f"--grpc-port={spec.grpc_port}", f"--http-port={spec.http_port}", f"--metrics-port={spec.metrics_port}"]


def tritonserver_command(spec: TritonArgs, binary: _Binary | str | Path) -> list[str]:
    """The single-process command line. Ports are taken as given (start_server resolves 0 first)."""
    path, backend_dir = _binary_path(binary)
    cmd = [path, f"--model-repository={spec.repo}"]
    if backend_dir is not None:
        cmd.append(f"--backend-directory={backend_dir}")
    cmd += _port_args(spec)
    cmd.append(f"--exit-timeout-secs={spec.exit_timeout_s}")
    cmd += list(spec.extra_args)
    return cmd


def mpirun_command(
    spec: TritonArgs,
    binary: _Binary | str | Path,
    *,
    mpirun: str = "mpirun",
    trtllm_model_names: Sequence[str] = TRTLLM_MODEL_NAMES,
) -> list[str]:
    """One tritonserver per rank under mpirun, as tensorrtllm_backend's launch_triton_server.py.

    Every rank gets `-n 1`, the repository, the ports, --disable-auto-complete-config and its own
    Python-backend shared-memory prefix; ranks other than 0 load only the TensorRT-LLM model(s)
    (explicit model control), so the ensemble, pre/postprocessing and BLS run once, on rank 0.
    """
    path, backend_dir = _binary_path(binary)
    cmd = [mpirun, "--allow-run-as-root"]
    for rank in range(spec.world_size):
        cmd += ["-n", "1", path, f"--model-repository={spec.repo}"]
        if backend_dir is not None:
            cmd.append(f"--backend-directory={backend_dir}")
        cmd += _port_args(spec)
        if rank != 0:
            cmd.append("--model-control-mode=explicit")
            cmd += [f"--load-model={name}" for name in trtllm_model_names]
        cmd += ["--disable-auto-complete-config", f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"]
        cmd.append(f"--exit-timeout-secs={spec.exit_timeout_s}")
        cmd += list(spec.extra_args)
        cmd.append(":")
    cmd.pop()  # no separator after the last rank
    return cmd


def trtllm_serve_option(name: str, value: object | None = None) -> list[str]:
    """One `trtllm-serve serve` option, checked against the upstream table (a ValueError is a bug here)."""
    flag = flags().get(name)
    if flag is None:  # a bug here, not the user's input: the table is upstream's
        raise ValueError(f"trtllm-serve @{SOURCE_COMMIT[:12]} has no option {name}")
    if flag.value == "flag":
        return [name] if value else []
    if flag.choices and str(value) not in flag.choices:
        raise ValueError(f"trtllm-serve {name} takes one of {', '.join(flag.choices)}, not {value!r}")
    return [name, str(value)]


def trtllm_serve_command(model_dir: Path | str, options_file: Path | str, host: str = "0.0.0.0",
                         port: int = DEFAULT_PORT, tp_size: int = 1, pp_size: int = 1) -> list[str]:
    """The command line that serves a PyTorch-backend deployable: its model/ folder and its LLM-API
    options (`--extra_llm_api_options`, merged over the flags, so the planner's choices win).

    tp/pp are passed as flags too so the process layout is visible in the command (and agrees with the
    options file's tensor/pipeline_parallel_size, which override them)."""
    option = trtllm_serve_option
    command = [BINARY, SUBCOMMAND, str(model_dir)]
    command += option("--host", host) + option("--port", int(port))
    command += option("--backend", TRTLLM_SERVE_BACKEND)
    command += option("--tp_size", int(tp_size)) + option("--pp_size", int(pp_size))
    command += option("--extra_llm_api_options", str(options_file))
    return command

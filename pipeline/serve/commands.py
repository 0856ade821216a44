"""Command lines of the servers the pipeline starts, for every caller that starts them.

- `tritonserver` on one model repository (`tritonserver_command`), or one rank per GPU under `mpirun`
  (`mpirun_command`, as tensorrtllm_backend's launch_triton_server.py): `pipeline serve` runs them here,
  `pipeline k8s render` writes them into the pods with the pod's ports and /models.
- `trtllm-serve` on a PyTorch-backend deployable (`trtllm_serve_command`), spelled as the pinned
  release's option table says (pipeline/serve/trtllm_serve.py): `pipeline serve --api openai` on a GPU and the
  pods of `pipeline k8s render --api openai`.

Pure functions of their arguments: nothing here finds binaries, resolves ports or starts processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from pipeline.serve.trtllm_serve import BINARY, DEFAULT_PORT, SOURCE_COMMIT, SUBCOMMAND, flags

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
    shm_region_prefix: str | None


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
    shm_region_prefix: str | None = None  # a pod's server is alone in its container: Triton's default


class _Binary(Protocol):
    path: Path
    backend_dir: Path | None


def _binary_path(binary: _Binary | str | Path) -> tuple[str, Path | None]:
    if isinstance(binary, (str, Path)):
        return str(binary), None
    return str(binary.path), binary.backend_dir


def _port_args(spec: TritonArgs) -> list[str]:
    return [f"--grpc-port={spec.grpc_port}", f"--http-port={spec.http_port}", f"--metrics-port={spec.metrics_port}"]


def _shm_prefix_arg(prefix: str) -> str:
    """The Python backend's name prefix for its /dev/shm regions (python_backend r24.10 src/python_be.cc:2049-2059;
    a region is named prefix + UUID, stub_launcher.cc:81-82)."""
    return f"--backend-config=python,shm-region-prefix-name={prefix}"


def tritonserver_command(spec: TritonArgs, binary: _Binary | str | Path) -> list[str]:
    """The single-process command line. Ports are taken as given (start_server resolves 0 first). With a
    shm_region_prefix, the Python backend names its shared-memory regions with it (pipeline.serve gives each
    server its own, so what a server leaves in /dev/shm can be told from other servers' regions)."""
    path, backend_dir = _binary_path(binary)
    cmd = [path, f"--model-repository={spec.repo}"]
    if backend_dir is not None:
        cmd.append(f"--backend-directory={backend_dir}")
    cmd += _port_args(spec)
    if spec.shm_region_prefix:
        cmd.append(_shm_prefix_arg(spec.shm_region_prefix))
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
    Python-backend shared-memory prefix (`prefix<rank>_` as NVIDIA's script, or the spec's
    shm_region_prefix followed by `rank<rank>_`); ranks other than 0 load only the TensorRT-LLM model(s)
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
        prefix = f"{spec.shm_region_prefix}rank{rank}_" if spec.shm_region_prefix else f"prefix{rank}_"
        cmd += ["--disable-auto-complete-config", _shm_prefix_arg(prefix)]
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

"""`pipeline serve`: run tritonserver on a model repository (--api triton), or an OpenAI-compatible server on a
PyTorch-backend deployable (--api openai), in the foreground until interrupted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from pipeline.cli._options import APIS, JsonOpt, one_of, set_json
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.core.output import OUT, simple_table
from pipeline.core.processes import ServerProcess, Terminated
from pipeline.serve.commands import TRITON_EXIT_TIMEOUT_S
from pipeline.serve import ServerSpec, start_server

ApiOpt = Annotated[str, typer.Option("--api", parser=one_of("--api", APIS), help=(
    "triton: a Triton model repository from `pipeline render`; openai: a PyTorch-backend deployable "
    "(trtllm-serve on a GPU, `transformers serve --continuous-batching` on the CPU)."))]
HttpPortOpt = Annotated[int, typer.Option("--http-port", min=0, max=65535, help="HTTP port (0: a free one).")]
GrpcPortOpt = Annotated[int, typer.Option("--grpc-port", min=0, max=65535, help="gRPC port (0: a free one). Triton only.")]
MetricsPortOpt = Annotated[int, typer.Option("--metrics-port", min=0, max=65535, help="Prometheus metrics port (0: a free one). Triton only.")]
WorldSizeOpt = Annotated[int, typer.Option("--world-size", min=1, help="Ranks (GPUs) for a TP/PP tensorrtllm engine; >1 runs under mpirun.")]
LogFileOpt = Annotated[Optional[Path], typer.Option("--log-file", help="Server log file (default: build/logs/<server>-*.log).")]
ReadyTimeoutOpt = Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds to wait until the server is ready.")]
WarmupOpt = Annotated[bool, typer.Option("--warmup/--no-warmup", help="Send a few requests before reporting ready.")]
ExitTimeoutOpt = Annotated[int, typer.Option("--exit-timeout", min=0, help=(
    "Seconds a stopping server waits for in-flight requests (tritonserver --exit-timeout-secs; the OpenAI "
    "server gets as long after SIGTERM before it is killed)."))]
TRITON_ONLY = {"grpc_port": 8001, "metrics_port": 8002, "world_size": 1}


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    repo: Annotated[Path, typer.Argument(help="Triton model repository (from `pipeline render`), or with --api openai a "
                                         "PyTorch-backend deployable (build/<model>/engines/<profile-id>/).")],
    api: ApiOpt = "triton",
    http_port: HttpPortOpt = 8000,
    grpc_port: GrpcPortOpt = 8001,
    metrics_port: MetricsPortOpt = 8002,
    world_size: WorldSizeOpt = 1,
    log_file: LogFileOpt = None,
    timeout: ReadyTimeoutOpt = 300.0,
    warmup: WarmupOpt = True,
    exit_timeout: ExitTimeoutOpt = TRITON_EXIT_TIMEOUT_S,
    json_output: JsonOpt = False,
) -> None:
    """Serve REPO until Ctrl-C or SIGTERM: tritonserver (a model that fails to load is named with its log line), or
    with --api openai an OpenAI-compatible server for a PyTorch-backend deployable."""
    from pipeline.serve.openai import check_api

    set_json(json_output)
    check_api(api, repo)
    if api == "openai":
        given = {"grpc_port": grpc_port, "metrics_port": metrics_port, "world_size": world_size}
        changed = [f"--{k.replace('_', '-')}" for k, v in given.items() if v != TRITON_ONLY[k]]
        if changed:
            raise InvalidInputError(f"{', '.join(changed)}: for --api triton only.",
                                    hint="Drop them; the OpenAI server listens on --http-port alone and takes its "
                                    "parallelism from the deployable's options.")
        _serve_openai(repo, http_port, log_file, timeout, warmup, exit_timeout)
        return
    spec = ServerSpec(repo=repo, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
                      world_size=world_size, log_file=log_file, ready_timeout_s=timeout, warmup=warmup,
                      exit_timeout_s=exit_timeout)
    OUT.info(f"Starting tritonserver on {spec.repo} ...")
    _serve_until_stopped("tritonserver", lambda: start_server(spec), lambda server: {
        "grpc_url": server.grpc_url, "http_url": server.http_url, "metrics_url": server.metrics_url,
        "pid": server.pid, "log_file": server.log_file, "ready_s": round(server.ready_s or 0, 2)})


def _serve_until_stopped(name: str, start: Callable[[], ServerProcess], describe: Callable[[Any], dict]) -> None:
    """Start the server, print where it listens, and wait: Ctrl-C or SIGTERM stops it (pipeline.cli.run turns
    SIGTERM into Terminated; leaving the with-block stops the server and its process group); a server that
    exits on its own is an error with its last log lines."""
    ready = False
    try:
        with start() as server:
            ready = True
            data = describe(server)
            OUT.result(data, table=simple_table(f"{name} ready (Ctrl-C stops it)", ["what", "where"],
                                                [[k, v] for k, v in data.items()]))
            code = server.wait()
            raise StageFailedError(f"{name} exited on its own with code {code}. Last log lines:\n{server.log_tail(20)}",
                                   hint=f"The full log is {server.log_file}.")
    except (KeyboardInterrupt, Terminated):
        if not ready:
            raise
        OUT.info("Stopped.")


def _serve_openai(path: Path, http_port: int, log_file: Path | None, timeout: float, warmup: bool, exit_timeout: int) -> None:
    from pipeline.core.deployable import read_deployable
    from pipeline.serve.openai import OpenAISpec, choose_engine, start_openai_server

    deployable = read_deployable(path)
    engine = choose_engine(deployable)
    spec = OpenAISpec(deployable=path, http_port=http_port, log_file=log_file, ready_timeout_s=timeout, warmup=warmup,
                      stop_timeout_s=exit_timeout)
    OUT.info(f"Starting {engine} on {deployable.model_dir} ...")
    _serve_until_stopped(engine, lambda: start_openai_server(spec, deployable, engine=engine), lambda server: {
        "url": server.url, "model": server.model, "server": engine, "pid": server.pid, "log_file": server.log_file,
        "ready_s": round(server.ready_s or 0, 2), "command": " ".join(server.command)})

"""`pipeline serve`: run tritonserver on a model repository in the foreground until interrupted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli._options import JsonOpt, set_json
from pipeline.errors import StageFailedError
from pipeline.output import OUT, simple_table
from pipeline.processes import Terminated
from pipeline.serve import TRITON_EXIT_TIMEOUT_S, ServerSpec, start_server

HttpPortOpt = Annotated[int, typer.Option("--http-port", min=0, max=65535, help="HTTP port (0: a free one).")]
GrpcPortOpt = Annotated[int, typer.Option("--grpc-port", min=0, max=65535, help="gRPC port (0: a free one).")]
MetricsPortOpt = Annotated[int, typer.Option("--metrics-port", min=0, max=65535, help="Prometheus metrics port (0: a free one).")]
WorldSizeOpt = Annotated[int, typer.Option("--world-size", min=1, help="Ranks (GPUs) for a TP/PP tensorrtllm engine; >1 runs under mpirun.")]
LogFileOpt = Annotated[Optional[Path], typer.Option("--log-file", help="Server log file (default: build/logs/tritonserver-*.log).")]
ReadyTimeoutOpt = Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds to wait for /v2/health/ready.")]
WarmupOpt = Annotated[bool, typer.Option("--warmup/--no-warmup", help="Send a few requests before reporting ready.")]
ExitTimeoutOpt = Annotated[int, typer.Option("--exit-timeout", min=0, help=(
    "Seconds a stopping server waits for in-flight requests (tritonserver --exit-timeout-secs)."))]


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    repo: Annotated[Path, typer.Argument(help="Triton model repository (from `pipeline render`).")],
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
    """Serve REPO with tritonserver until Ctrl-C or SIGTERM; a model that fails to load is named with its log line."""
    set_json(json_output)
    spec = ServerSpec(repo=repo, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
                      world_size=world_size, log_file=log_file, ready_timeout_s=timeout, warmup=warmup,
                      exit_timeout_s=exit_timeout)
    ready = False
    try:
        OUT.info(f"Starting tritonserver on {spec.repo} ...")
        with start_server(spec) as server:
            ready = True
            data = {"grpc_url": server.grpc_url, "http_url": server.http_url, "metrics_url": server.metrics_url,
                    "pid": server.pid, "log_file": server.log_file, "ready_s": round(server.ready_s or 0, 2)}
            OUT.result(data, table=simple_table("tritonserver ready (Ctrl-C stops it)", ["what", "where"],
                                                [[k, v] for k, v in data.items()]))
            code = server.wait()
            raise StageFailedError(f"tritonserver exited on its own with code {code}. Last log lines:\n{server.log_tail(20)}",
                                   hint=f"The full log is {server.log_file}.")
    except (KeyboardInterrupt, Terminated):  # Ctrl-C, or SIGTERM (pipeline.cli.run turns it into Terminated)
        if not ready:
            raise
        OUT.info("Stopped.")  # leaving the with-block stopped the server and its process group

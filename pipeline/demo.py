"""The whole job on the CPU with the demo model: download -> convert -> build -> render -> serve ->
smoke -> stop. Each step is the same library call the individual commands make."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from pipeline.errors import GateFailedError



class DemoSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field("demo", description="download source (default: the bundled SmolLM2-135M-Instruct GGUF)")
    quant: str = "fp16"
    goal: str = "latency"
    ready_timeout_s: float = Field(600.0, gt=0)
    root: Path | None = None


class DemoStep(BaseModel):
    name: str
    seconds: float
    artifact: str
    detail: str = ""


class DemoResult(BaseModel):
    steps: list[DemoStep]
    passed: bool
    smoke: dict[str, Any]

    @property
    def total_s(self) -> float:
        return round(sum(step.seconds for step in self.steps), 1)


def run_demo(spec: DemoSpec, on_step: Callable[[DemoStep], None] | None = None) -> DemoResult:
    from pipeline.build import BuildSpec, build_engine
    from pipeline.convert import ConvertSpec, convert
    from pipeline.download import DownloadSpec, download
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server
    from pipeline.smoke import SmokeSpec, run_smoke

    steps: list[DemoStep] = []

    def record(name: str, started: float, artifact: Path | str, detail: str = "") -> None:
        step = DemoStep(name=name, seconds=round(time.perf_counter() - started, 2), artifact=str(artifact), detail=detail)
        steps.append(step)
        if on_step:
            on_step(step)

    t = time.perf_counter()
    downloaded = download(DownloadSpec(source=spec.source, root=spec.root))
    record("download", t, downloaded.path, "reused" if downloaded.skipped else f"{downloaded.bytes / 2**20:.0f} MiB")

    t = time.perf_counter()
    checkpoint = convert(ConvertSpec(model=str(downloaded.path), quant=spec.quant, gpu="cpu", root=spec.root))
    record("convert", t, checkpoint.path, "reused" if checkpoint.skipped else f"{checkpoint.quant}, {checkpoint.ranks} rank(s)")

    t = time.perf_counter()
    engine = build_engine(BuildSpec(gpu="cpu", checkpoint=downloaded.path, goal=spec.goal))
    record("build", t, engine.engine_dir, f"{engine.plan.profile_name}{' (cached)' if engine.cached else ''}")

    t = time.perf_counter()
    repo = render(RenderSpec(engine=engine.engine_dir))
    record("render", t, repo.repo, f"{len(repo.models)} models, runtime {repo.runtime}")

    t = time.perf_counter()
    log_file = repo.repo.parent / f"{repo.repo.name}.server.log"
    with start_server(ServerSpec(repo=repo.repo, log_file=log_file, ready_timeout_s=spec.ready_timeout_s)) as server:
        record("serve", t, server.log_file, f"ready on grpc {server.grpc_url}")
        t = time.perf_counter()
        report = run_smoke(SmokeSpec(url=server.grpc_url))
        failed = [c.name for c in report.checks if not c.passed]
        record("smoke", t, server.grpc_url, f"{len(report.checks) - len(failed)}/{len(report.checks)} passed"
               + (f"; failed: {', '.join(failed)}" if failed else ""))
        t = time.perf_counter()
    record("stop", t, "", "server stopped")
    return DemoResult(steps=steps, passed=report.passed, smoke=report.model_dump(mode="json"))


def require_demo_pass(result: DemoResult) -> None:
    if not result.passed:
        failed = [c["name"] for c in result.smoke["checks"] if not c["passed"]]
        raise GateFailedError(f"The demo's smoke checks failed: {', '.join(failed)}.",
                              hint="Read the server log named in the 'serve' row.")




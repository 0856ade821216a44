"""`pipeline demo`: the whole job end to end on the CPU."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli._options import JsonOpt, QuantOpt, set_json
from pipeline.demo import DemoSpec, DemoStep, require_demo_pass, run_demo
from pipeline.output import OUT, simple_table

SourceArg = Annotated[str, typer.Argument(help="Download source (default: the bundled demo model).")]


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(source: SourceArg = "demo", quant: QuantOpt = "fp16", json_output: JsonOpt = False) -> None:
    """download -> convert -> build (cpu) -> render -> serve -> smoke -> stop, with one summary table."""
    set_json(json_output)

    def show(step: DemoStep) -> None:
        OUT.info(f"[bold]{step.name}[/bold] {step.seconds:.1f} s  {step.detail}")

    result = run_demo(DemoSpec(source=source, quant=quant), on_step=show)
    rows = [[s.name, f"{s.seconds:.1f}", s.detail, s.artifact] for s in result.steps]
    rows.append(["total", f"{result.total_s:.1f}", "PASS" if result.passed else "FAIL", ""])
    OUT.result(result, table=simple_table("make demo", ["step", "s", "result", "where"], rows))
    require_demo_pass(result)

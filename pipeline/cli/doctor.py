"""`pipeline doctor`: what this machine can run."""

from __future__ import annotations

import typer

from pipeline.cli._options import JsonOpt, set_json
from pipeline.core.output import OUT, simple_table


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def doctor(json_output: JsonOpt = False) -> None:
    """GPUs, driver/CUDA, TensorRT-LLM and Triton presence, free disk, and which runtimes can run here."""
    from pipeline.doctor import doctor as run_doctor, report_rows

    set_json(json_output)
    report = run_doctor()
    OUT.result(report, table=simple_table("pipeline doctor", ["check", "result"], report_rows(report)), text=report.summary)

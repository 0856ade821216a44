"""`pipeline smoke`: the release gate against a running server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli._options import JsonOpt, ServedModelOpt, UrlOpt, set_json, spec_from_options
from pipeline.output import OUT, simple_table
from pipeline.smoke import SmokeSpec, require_pass, run_smoke

ReportOpt = Annotated[Optional[Path], typer.Option("--report", help="Also write the JSON report to this file.")]
LongPromptOpt = Annotated[int, typer.Option("--long-prompt-words", min=1, help="Words in the too-long prompt check.")]


def register(app: typer.Typer) -> None:
    app.command("smoke")(smoke)


def smoke(
    url: UrlOpt,
    model: ServedModelOpt = "ensemble",
    report: ReportOpt = None,
    long_prompt_words: LongPromptOpt = 20000,
    json_output: JsonOpt = False,
) -> None:
    """Run the smoke checks against a served repository; exit 0 only when all pass (4 otherwise)."""
    set_json(json_output)
    spec = spec_from_options(SmokeSpec, url=url, model=model, report=report, long_prompt_words=long_prompt_words)
    result = run_smoke(spec)
    rows = [["PASS" if c.passed else "FAIL", c.name, f"{c.seconds:.1f}", c.detail] for c in result.checks]
    OUT.result(result, table=simple_table(f"Smoke: {result.model} at {result.url}", ["result", "check", "s", "detail"], rows))
    require_pass(result)

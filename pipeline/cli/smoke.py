"""`pipeline smoke`: the release gate against a running server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from pipeline.cli._options import EndpointOpt, JsonOpt, ServedModelOpt, UrlOpt, set_json, spec_from_options
from pipeline.core.output import OUT, simple_table
from pipeline.smoke import SmokeSpec, require_pass, run_smoke

ReportOpt = Annotated[Optional[Path], typer.Option("--report", help="Also write the JSON report to this file.")]
LongPromptOpt = Annotated[Optional[int], typer.Option("--long-prompt-words", min=1, help="Words in the too-long prompt "
                                                      "check (default 20000; OpenAI: the model's context + 64).")]
SkipOpt = Annotated[Optional[List[str]], typer.Option("--skip", help="A check not to run (repeat), e.g. too_long_prompt "
                                                    "against a server that does not check prompt lengths.")]

LoraTaskOpt = Annotated[Optional[int], typer.Option("--lora-task-id", min=1, help="An adapter the deployment serves (e.g. "
                                                    "prefetched by `pipeline build --lora`): the lora check sends it.")]
LoraNameOpt = Annotated[Optional[str], typer.Option("--lora-name", help="OpenAI (trtllm-serve): lora_request.lora_name; "
                                                    "the LLM-API model: lora_name (default: the task id).")]
LoraPathOpt = Annotated[Optional[str], typer.Option("--lora-path", help="OpenAI (trtllm-serve): lora_request.lora_path; the "
                                                    "LLM-API model: lora_path (needed there): the adapter's folder on the server.")]


def register(app: typer.Typer) -> None:
    app.command("smoke")(smoke)


def smoke(
    url: UrlOpt,
    model: ServedModelOpt = None,
    endpoint: EndpointOpt = "chat",
    report: ReportOpt = None,
    long_prompt_words: LongPromptOpt = None,
    skip: SkipOpt = None,
    lora_task_id: LoraTaskOpt = None,
    lora_name: LoraNameOpt = None,
    lora_path: LoraPathOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Run the smoke checks against a served model (Triton ensemble/BLS, Triton LLM-API, or OpenAI API);
    exit 0 only when all pass (4 otherwise)."""
    set_json(json_output)
    spec = spec_from_options(SmokeSpec, url=url, model=model, endpoint=endpoint, report=report,
                             long_prompt_words=long_prompt_words, skip=tuple(skip or ()),
                             lora_task_id=lora_task_id, lora_name=lora_name, lora_path=lora_path)
    result = run_smoke(spec)
    rows = [["SKIP" if c.skipped else "PASS" if c.passed else "FAIL", c.name, f"{c.seconds:.1f}", c.detail] for c in result.checks]
    title = f"Smoke: {result.model} at {result.url}" + (f" ({result.contract})" if result.contract else "")
    OUT.result(result, table=simple_table(title, ["result", "check", "s", "detail"], rows))
    require_pass(result)

"""`pipeline demo` and `pipeline engine`: the stages chained, with one summary table."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from pipeline.cli.build import LoraOpt
from pipeline.cli._options import (
    BackendOpt, GoalOpt, GpuOpt, JsonOpt, KvCacheOpt, PpOpt, QuantOpt, TpOpt, set_json, spec_from_options,
)
from pipeline.jobs import DemoSpec, JobStep, EngineJobSpec, require_demo_pass, run_demo, run_engine_job
from pipeline.core.output import OUT, simple_table
from pipeline.core.reporting import OutputReporter

SourceArg = Annotated[str, typer.Argument(help="Download source: demo, hf:org/name[@rev], local:PATH, gguf:PATH.")]
EvalOpt = Annotated[bool, typer.Option("--eval", help="Run the accuracy gate and record it in the checkpoint manifest.")]
MaxDeltaOpt = Annotated[Optional[float], typer.Option("--max-delta", help="Allowed relative perplexity rise for --eval.")]
JobSloOpt = Annotated[Optional[str], typer.Option("--slo", help="Build limits chosen for SLOs (see `pipeline build --slo`), with --isl/--osl.")]
JobIslOpt = Annotated[Optional[int], typer.Option("--isl", min=1, help="Prompt tokens the --slo choice is planned for.")]
JobOslOpt = Annotated[Optional[int], typer.Option("--osl", min=1, help="Output tokens the --slo choice is planned for.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Stop at the build plan (no trtllm-build, no render).")]


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
    app.command("engine")(engine)


def _show(step: JobStep) -> None:
    OUT.info(f"[bold]{step.name}[/bold] {step.seconds:.1f} s  {step.detail}")


def _rows(steps: list[JobStep]) -> list[list[str]]:
    return [[s.name, f"{s.seconds:.1f}", s.detail, s.artifact] for s in steps]


def demo(source: SourceArg = "demo", quant: QuantOpt = "fp16", json_output: JsonOpt = False) -> None:
    """download -> convert -> build (cpu) -> render -> serve -> smoke -> stop, with one summary table."""
    set_json(json_output)
    result = run_demo(DemoSpec(source=source, quant=quant), on_step=_show, reporter=OutputReporter())
    answer = f"{result.prompt!r} -> {result.answer!r}" if result.answer is not None else "(no answer)"
    rows = _rows(result.steps) + [["answer", "", answer, "ensemble, greedy"],
                                  ["total", f"{result.total_s:.1f}", "PASS" if result.passed else "FAIL", ""]]
    OUT.result(result, table=simple_table("make demo", ["step", "s", "result", "where"], rows))
    require_demo_pass(result)


def engine(
    source: SourceArg = "demo",
    gpu: GpuOpt = "h100",
    quant: QuantOpt = "fp8",
    kv_cache: KvCacheOpt = None,
    goal: GoalOpt = "throughput",
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    eval_gate: EvalOpt = False,
    max_delta: MaxDeltaOpt = None,
    dry_run: DryRunOpt = False,
    backend: BackendOpt = "tensorrt",
    slo: JobSloOpt = None,
    isl: JobIslOpt = None,
    osl: JobOslOpt = None,
    speculative: Annotated[Optional[str], typer.Option("--speculative", help="draft-target|ngram|lookahead|eagle3 (see build).")] = None,
    draft: Annotated[Optional[str], typer.Option("--draft", help="The draft model SOURCE (downloaded and converted too).")] = None,
    max_draft_len: Annotated[Optional[int], typer.Option("--max-draft-len", help="Draft tokens per step.")] = None,
    lora: LoraOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """download -> convert -> (evaluate) -> build -> render for one GPU: what `make engine` runs. With
    --backend pytorch: convert --format hf, then the LLM-API deployable and its Triton LLM-API repository."""
    from pipeline.build.speculative import speculative_spec

    set_json(json_output)
    spec = spec_from_options(EngineJobSpec, source=source, gpu=gpu, quant=quant, kv_cache=kv_cache, goal=goal, tp=tp, pp=pp,
                       evaluate=eval_gate, max_delta=max_delta, dry_run=dry_run, backend=backend,
                             slo=slo, isl=isl, osl=osl, speculative=speculative_spec(speculative, draft, max_draft_len),
                             lora=tuple(lora or ()))
    result = run_engine_job(spec, on_step=_show, reporter=OutputReporter())
    rows = _rows(result.steps) + [["total", f"{result.total_s:.1f}", "", str(result.repo or "")]]
    OUT.result(result, table=simple_table(f"engine: {gpu} {quant} {goal}", ["step", "s", "result", "where"], rows))

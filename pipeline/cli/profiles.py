"""`pipeline profiles`: which build profiles a model can have on each GPU (like NIM's list-model-profiles)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli._options import BACKENDS, GoalOpt, JsonOpt, one_of, resolve_gpu, set_json
from pipeline.core.output import OUT, simple_table

ModelSourceOpt = Annotated[str, typer.Option(
    "--model", help="Model name under build/ (its hf/ folder), or a folder / config.json path.")]
GpuOrAutoOpt = Annotated[Optional[str], typer.Option(
    "--gpu", help="One GPU key, or `auto` for this machine's GPU (default: every GPU in the table).")]
BackendFilterOpt = Annotated[Optional[str], typer.Option(
    "--backend", parser=one_of("--backend", BACKENDS),
    help="tensorrt or pytorch: list one backend's profiles (default: both).")]


def register(app: typer.Typer) -> None:
    app.command("profiles")(profiles)


def profiles(model: ModelSourceOpt, gpu: GpuOrAutoOpt = None, goal: GoalOpt = "throughput",
             backend: BackendFilterOpt = None, json_output: JsonOpt = False) -> None:
    """Runnable, runnable-but-low-memory (with the fix) and incompatible (with the reason) profiles per GPU x precision
    x backend, with why a profile cannot be built and served on this machine and what the input still needs."""
    from pipeline.core.paths import stage_dir
    from pipeline.build.catalog import list_profiles

    set_json(json_output)
    source = Path(model)
    name = None
    if not source.exists():
        name = model
        source = stage_dir(model, "hf")
    gpus = None
    if gpu:
        gpus = [resolve_gpu(gpu)]
    rows = [r for r in list_profiles(source, model=name, gpus=gpus, goal=goal) if backend in (None, r.backend)]
    table = simple_table(
        f"Build profiles for {model} ({goal}); --json for the full reasons",
        ["status", "backend", "GPU", "quant", "tp", "GiB/GPU", "KV seqs", "batch", "built", "reason / fix; here"],
        [[r.status, r.backend, r.gpu, r.quant, r.tp, r.weights_gib_per_gpu, r.kv_capacity_sequences, r.max_batch_size,
          r.built or "", _note(r)] for r in rows],
    )
    OUT.result(rows, table=table)


def _note(row) -> str:
    """Why not (or the fix), then what stops it here: no GPU / tool, or the conversion the input needs."""
    if row.status == "incompatible":
        return _short(row.reason, 60)
    needs = "convert --format hf" if "--format hf" in row.needs else "convert to trtllm" if row.needs else ""
    here = "; ".join(filter(None, [row.here.split(" (")[0], needs]))
    return "; ".join(filter(None, [_short(row.reason or row.fix, 40), here]))


def _short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

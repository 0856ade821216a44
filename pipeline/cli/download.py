"""`pipeline download SOURCE`: a checkpoint from the Hub, a folder or a GGUF file into build/<model>/hf/."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from pipeline.cli._options import ForceOpt, JsonOpt, OutDirOpt, set_json
from pipeline.download import DownloadSpec, download as run_download
from pipeline.core.output import OUT
from pipeline.core.reporting import OutputReporter

SourceArg = Annotated[
    str,
    typer.Argument(
        help="hf:org/name\\[@revision], local:PATH (or a folder path), gguf:FILE.gguf, or demo.",
        show_default=False,
    ),
]
RevisionOpt = Annotated[
    Optional[str], typer.Option("--revision", help="Hub branch, tag or commit (hf: sources only; default main).")
]


def register(app: typer.Typer) -> None:
    app.command("download")(download)


def download(
    source: SourceArg,
    revision: RevisionOpt = None,
    out: OutDirOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Fetch or convert a model into build/<model>/hf/ (safetensors + tokenizer + manifest).

    A second run with the same source is a no-op; files that no longer match the manifest are made again.
    """
    set_json(json_output)
    result = run_download(DownloadSpec(source=source, revision=revision, out=out, force=force), OutputReporter())
    if result.skipped:
        OUT.info(f"up to date: {result.path} (same source, files intact; --force redoes it)")
    mib = result.bytes / (1 << 20)
    commit = f" @ {result.commit[:12]}" if result.commit else ""
    verb = "kept" if result.skipped else "wrote"
    OUT.result(
        result,
        text=f"{verb} {result.model}: {result.files} files, {mib:.1f} MiB{commit} in {result.duration_s:.1f} s -> {result.path}",
    )

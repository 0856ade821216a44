"""One output sink: results to stdout, logs/hints/warnings to stderr; --json swaps the renderer
and turns progress bars off."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table


# Output that goes to a file or a CI log has no terminal width; rich would then wrap tables to 80 columns, cells a few
# characters wide. Such output is as wide as the tables need, up to this many columns ($COLUMNS still decides).
PIPED_WIDTH = 200


def _console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty()) and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, soft_wrap=True, width=PIPED_WIDTH if piped else None)


@dataclass
class Output:
    json_mode: bool = False
    quiet: bool = False
    stdout: Console = field(default_factory=_console)
    stderr: Console = field(default_factory=lambda: _console(stderr=True))

    def result(self, data: Any, *, table: Table | None = None, text: str | None = None) -> None:
        """Print a command's result: JSON in --json mode, else the table or text given."""
        if self.json_mode:
            sys.stdout.write(json.dumps(to_jsonable(data), indent=2, sort_keys=False) + "\n")
            sys.stdout.flush()
            return
        if table is not None:
            self.stdout.print(table)
        if text is not None:
            self.stdout.print(text, highlight=False, markup=False)
        if table is None and text is None:
            self.stdout.print_json(json.dumps(to_jsonable(data)))

    def info(self, message: str) -> None:
        if not self.quiet:
            self.stderr.print(message, highlight=False)

    def warn(self, message: str) -> None:
        self.stderr.print(f"[yellow]warning:[/yellow] {message}", highlight=False)

    def error(self, message: str, hint: str | None = None) -> None:
        self.stderr.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False)
        if hint:
            self.stderr.print(f"[dim]hint:[/dim] {escape(hint)}", highlight=False)

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        """A rich progress display on stderr; disabled (but still usable) in --json/quiet mode."""
        progress = Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=self.stderr,
            disable=self.json_mode or self.quiet,
            transient=False,
        )
        with progress:
            yield progress


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def simple_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    return table


def to_jsonable(value: Any) -> Any:
    """Pydantic models, dataclasses and paths to plain JSON values."""
    from dataclasses import asdict, is_dataclass
    from pathlib import Path

    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


OUT = Output()
"""The process-wide sink; the CLI configures it from --json/--quiet before a command runs."""

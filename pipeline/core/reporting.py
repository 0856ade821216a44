"""How a stage says what it is doing without printing: a `Reporter` passed in, silent by default.

A stage reports events (info, warn) and progress (start a task with a total, advance it, finish
it); the CLI passes `OutputReporter`, which renders them through `pipeline.core.output.OUT` (rich
progress bars on stderr, none under --json/--quiet). The job runner's `on_step` callback does the
same for whole steps.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import ContextManager, Iterator, Protocol

from rich.progress import Progress as RichProgress

from pipeline.core.output import OUT, Output


class Progress(Protocol):
    """Tasks of a long piece of work, each with a total."""

    def start(self, description: str, total: int | None) -> int:
        """A new task (total None: of unknown length, shown as activity); returns its id."""
        ...

    def advance(self, task: int, amount: int = 1, *, description: str | None = None) -> None:
        """amount more done (and, given one, a new description)."""
        ...

    def finish(self, task: int) -> None:
        """The task is complete, whatever was counted."""
        ...


class Reporter(Protocol):
    # Whether progress is shown at all: third-party bars (huggingface_hub's, transformers') follow it.
    shows_progress: bool

    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def progress(self) -> ContextManager[Progress]:
        """A progress display for the duration of the block."""
        ...


class _Uncounted:
    def __init__(self) -> None:
        self._ids = itertools.count()

    def start(self, description: str, total: int | None) -> int:
        return next(self._ids)

    def advance(self, task: int, amount: int = 1, *, description: str | None = None) -> None:
        pass

    def finish(self, task: int) -> None:
        pass


class SilentReporter:
    """Reports nothing: what a stage gets when called as a library."""

    shows_progress = False

    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        yield _Uncounted()


SILENT = SilentReporter()


class RecordingReporter(SilentReporter):
    """Keeps the events as ("info" | "warn", message) and shows no progress: for tests, and for callers
    that report afterwards."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def info(self, message: str) -> None:
        self.events.append(("info", message))

    def warn(self, message: str) -> None:
        self.events.append(("warn", message))


class _Bars:
    """Progress on a rich progress display."""

    def __init__(self, bars: RichProgress) -> None:
        self._bars = bars
        self._totals: dict[int, int | None] = {}

    def start(self, description: str, total: int | None) -> int:
        task = self._bars.add_task(description, total=total)
        self._totals[task] = total
        return task

    def advance(self, task: int, amount: int = 1, *, description: str | None = None) -> None:
        self._bars.update(task, advance=amount, description=description)  # type: ignore[arg-type]

    def finish(self, task: int) -> None:
        total = self._totals[task]
        self._bars.update(task, total=total or 1, completed=total or 1)


class OutputReporter:
    """Renders through an output sink (default: the process-wide OUT the CLI configures)."""

    def __init__(self, out: Output | None = None) -> None:
        self.out = out if out is not None else OUT

    @property
    def shows_progress(self) -> bool:
        return not (self.out.json_mode or self.out.quiet)

    def info(self, message: str) -> None:
        self.out.info(message)

    def warn(self, message: str) -> None:
        self.out.warn(message)

    @contextmanager
    def progress(self) -> Iterator[Progress]:
        with self.out.progress() as bars:
            yield _Bars(bars)


__all__ = ["SILENT", "OutputReporter", "Progress", "RecordingReporter", "Reporter", "SilentReporter"]

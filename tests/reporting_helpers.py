"""A reporter for tests that keeps what a stage did with its events and its progress display, in order."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


class ProgressLog:
    """calls: ("info"|"warn", message), ("start", description, total), ("advance", amount, description),
    ("finish",)."""

    shows_progress = True

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def info(self, message: str) -> None:
        self.calls.append(("info", message))

    def warn(self, message: str) -> None:
        self.calls.append(("warn", message))

    @contextmanager
    def progress(self) -> Iterator["ProgressLog"]:
        yield self

    def start(self, description: str, total: int | None) -> int:
        self.calls.append(("start", description, total))
        return len(self.calls)

    def advance(self, task: int, amount: int = 1, *, description: str | None = None) -> None:
        self.calls.append(("advance", amount, description))

    def finish(self, task: int) -> None:
        self.calls.append(("finish",))

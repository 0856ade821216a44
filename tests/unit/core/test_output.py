"""pipeline.core.output: how wide results are printed where there is no terminal (a file, a pipe, a CI log)."""

from __future__ import annotations

import io

import pytest
from rich.table import Table

from pipeline.core import output
from pipeline.core.output import PIPED_WIDTH, Output


def _printed(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> tuple[Output, str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    sink = io.StringIO()
    monkeypatch.setattr(output.sys, "stdout", sink)
    out = Output()
    table = Table("GPU", *(f"a column named {i}" for i in range(8)))
    table.add_row("1x h100-sxm", *(f"value {i}" for i in range(8)))
    out.result({}, table=table)
    return out, sink.getvalue()


def test_a_table_piped_without_columns_is_as_wide_as_it_needs_up_to_the_piped_width(monkeypatch) -> None:
    """Before: rich wrapped a piped table to 80 columns, so `pipeline plan --slo`'s 11 columns came out 4-6 characters
    wide, a number split over lines (tests/image/checks.sh sets COLUMNS=200 for that reason)."""
    out, text = _printed(monkeypatch, None)
    widths = {len(line) for line in text.splitlines()}
    assert out.stdout.width == PIPED_WIDTH and 80 < max(widths) <= PIPED_WIDTH
    assert "1x h100-sxm" in text and "a column named 7" in text  # no cell wrapped


def test_columns_still_decides_the_width(monkeypatch) -> None:
    out, text = _printed(monkeypatch, "100")
    assert out.stdout.width == 100 and max(len(line) for line in text.splitlines()) <= 100

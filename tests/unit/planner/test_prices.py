"""pipeline.planner.prices: the sourced price table, --prices files and --price overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import gpu_table
from pipeline.planner.prices import default_prices, load_prices


def test_every_bundled_price_has_a_source_url_and_a_date_and_names_a_table_gpu() -> None:
    prices = default_prices()
    assert prices and set(prices) <= set(gpu_table())
    for price in prices.values():
        assert price.source.startswith("https://") and len(price.date) == 10 and price.usd_per_gpu_hour > 0
    assert "cpu" not in prices and "a10g" not in prices  # no published price sourced: listed without cost


def test_a_file_replaces_the_table_and_overrides_win(tmp_path: Path) -> None:
    file = tmp_path / "p.csv"
    file.write_text("gpu,usd_per_gpu_hour,source,date\nh100,3.0,https://example.org/quote,2026-11-01\n")
    prices = load_prices(file, ["h200=5.5"])
    assert set(prices) == {"h100-sxm", "h200"}
    assert prices["h100-sxm"].usd_per_gpu_hour == 3.0 and prices["h200"].source.startswith("--price")


@pytest.mark.parametrize("text, words", [
    ("gpu\tusd_per_gpu_hour\nh100\t3\n", "no source column"),
    ("gpu,usd_per_gpu_hour,source\nh900,3,https://x\n", "Unknown GPU"),
    ("gpu,usd_per_gpu_hour,source\nh100,free,https://x\n", "not a number"),
])
def test_bad_files_are_refused_with_what_would_work(tmp_path: Path, text: str, words: str) -> None:
    file = tmp_path / "p.tsv"
    file.write_text(text)
    with pytest.raises(InvalidInputError) as error:
        load_prices(file)
    assert words in error.value.message and error.value.hint


def test_bad_overrides_are_refused() -> None:
    for bad in ("h100", "h100=-1", "h900=2"):
        with pytest.raises(InvalidInputError):
            load_prices(None, [bad])

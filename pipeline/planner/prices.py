"""$/GPU-hour: pipeline/data/gpu_prices.tsv (published on-demand prices, each with its source and date),
a user's own file in the same shape (`--prices FILE`), and `--price gpu=USD` overrides. No price is
invented: a GPU without a row is planned without cost."""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import get_gpu

COLUMNS = ("gpu", "usd_per_gpu_hour", "source")
FILE_HINT = ("A prices file is a TSV (or CSV) with a header naming at least gpu, usd_per_gpu_hour and source "
             "(and optionally date, note); one row per GPU key, e.g. `h100-sxm\t4.29\thttps://lambda.ai/instances`.")


class Price(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu: str
    usd_per_gpu_hour: float
    source: str
    date: str = ""
    note: str = ""


def _rows(text: str, where: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not lines:
        raise InvalidInputError(f"{where} holds no prices.", hint=FILE_HINT)
    delimiter = "\t" if "\t" in lines[0] else ","
    reader = csv.DictReader(lines, delimiter=delimiter)
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InvalidInputError(f"{where} has no {', '.join(missing)} column (its header: {', '.join(header) or 'none'}).",
                                hint=FILE_HINT)
    return [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in reader]


def _price(row: dict[str, str], where: str) -> Price:
    gpu = get_gpu(row["gpu"]).key
    try:
        usd = float(row["usd_per_gpu_hour"])
    except ValueError:
        raise InvalidInputError(f"{where}: the price of {gpu} ({row['usd_per_gpu_hour']!r}) is not a number.",
                                hint=FILE_HINT) from None
    if usd <= 0 or not row["source"]:
        raise InvalidInputError(f"{where}: {gpu} needs a positive price and a source.", hint=FILE_HINT)
    return Price(gpu=gpu, usd_per_gpu_hour=usd, source=row["source"], date=row.get("date", ""), note=row.get("note", ""))


def read_prices(text: str, where: str) -> dict[str, Price]:
    return {p.gpu: p for p in (_price(row, where) for row in _rows(text, where))}


def default_prices() -> dict[str, Price]:
    text = resources.files("pipeline.data").joinpath("gpu_prices.tsv").read_text(encoding="utf-8")
    return read_prices(text, "pipeline/data/gpu_prices.tsv")


def parse_price_override(text: str) -> Price:
    """`h100=3.9` -> the user's price for that GPU (source: the command line)."""
    gpu, sep, value = text.partition("=")
    hint = "Use --price GPU=USD_PER_GPU_HOUR, e.g. --price h100=3.9."
    if not sep:
        raise InvalidInputError(f"Invalid price {text!r}: no '='.", hint=hint)
    try:
        usd = float(value)
    except ValueError:
        raise InvalidInputError(f"Invalid price {text!r}: {value!r} is not a number.", hint=hint) from None
    if usd <= 0:
        raise InvalidInputError(f"Invalid price {text!r}: it must be positive.", hint=hint)
    return Price(gpu=get_gpu(gpu).key, usd_per_gpu_hour=usd, source="--price (command line)")


def load_prices(path: Path | None = None, overrides: Iterable[str] = ()) -> dict[str, Price]:
    """The price table: the bundled one, or `path` instead; then each `gpu=usd` override on top."""
    if path is None:
        prices = default_prices()
    else:
        if not Path(path).is_file():
            raise InvalidInputError(f"No prices file at {path}.", hint=FILE_HINT)
        prices = read_prices(Path(path).read_text(encoding="utf-8"), str(path))
    for text in overrides:
        price = parse_price_override(text)
        prices[price.gpu] = price
    return prices

"""The pipeline's data files: the GPU table, upstream fact tables (each with its source and commit in a
`#` header), calibration and evaluation text, and the Kubernetes dashboards and rules."""

from __future__ import annotations

import csv
from importlib import resources


def fact_rows(text: str) -> list[dict[str, str]]:
    """The rows of a tab-separated fact table; lines that start with `#` (its provenance header) are comments."""
    return list(csv.DictReader((line for line in text.splitlines() if line and not line.startswith("#")), delimiter="\t"))


def packaged_fact_rows(name: str) -> list[dict[str, str]]:
    """fact_rows of the fact table `name` shipped in this package (pipeline/data/<name>)."""
    return fact_rows(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))

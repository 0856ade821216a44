"""Reading the project's Dockerfile in tests: its instructions, with continuation lines joined."""

from __future__ import annotations

import re
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[1] / "Dockerfile"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(KEYWORD, rest) for every instruction, comments left out."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            rows.append((keyword.upper(), rest.strip()))
    return rows


def env(path: Path = DOCKERFILE) -> dict[str, str]:
    """Every ENV key=value (quotes stripped; later ones win)."""
    values: dict[str, str] = {}
    for keyword, rest in instructions(path):
        if keyword == "ENV":
            values.update((k, v.strip('"')) for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', rest))
    return values

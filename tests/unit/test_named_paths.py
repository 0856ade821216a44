"""Files of this repository named in its data files' provenance notes and in ARCHITECTURE.md and README.md exist: a module that
moves must take the notes that point at it along (four data files still named pre-#22 paths)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"(?<![\w/.-])((?:pipeline|tests|scripts|model_repo_templates)/[\w/.-]+\.(?:py|tsv|json|jsonl|md|pbtxt))(?!\.?[\w-])")
PLACEHOLDER = re.compile(r"[A-Z]{3,}")  # ARCHITECTURE.md's tests/unit/STAGE/test_MODULE.py pattern
TEXT_DATA = {"calibration", "bench", "eval"}  # prompt and calibration texts quote paths of their own


def _documents() -> list[Path]:
    data = [p for p in (REPO / "pipeline" / "data").rglob("*")
            if p.suffix in {".json", ".tsv", ".md"} and not TEXT_DATA & set(p.relative_to(REPO / "pipeline" / "data").parts[:1])]
    return [REPO / "ARCHITECTURE.md", REPO / "README.md", *sorted(data)]


def test_every_repository_path_a_note_names_exists():
    missing = []
    for document in _documents():
        for line_no, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
            for name in NAMED.findall(line):
                if not PLACEHOLDER.search(name) and not (REPO / name.rstrip(".")).exists():
                    missing.append(f"{document.relative_to(REPO)}:{line_no} names {name}")
    assert not missing, "\n".join(missing)

"""The tokenizer files of an HF folder: one list, for build (the engine folder's tokenizer/, the CPU folder)
and render (the bundle's tokenizer, the repository's check that one is there)."""

from __future__ import annotations

from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "added_tokens.json",
)


def tokenizer_files(folder: Path) -> list[Path]:
    """The tokenizer files of a folder (an HF checkpoint's weights stay out)."""
    return [Path(folder) / name for name in TOKENIZER_FILES if (Path(folder) / name).is_file()]

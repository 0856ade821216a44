"""What a Hugging Face checkpoint folder must hold for conversion: the files it needs
(ALLOW_PATTERNS, top level only) and the checks `download` and `convert` both make on a folder
(config.json readable, safetensors weights complete and not truncated)."""

from __future__ import annotations

import fnmatch
import json
import struct
from pathlib import Path

from pipeline.core.errors import InvalidInputError

# What conversion needs from a checkpoint, top-level files only. Everything else in a repository
# (pytorch_model.bin duplicates, ONNX/GGUF exports, images, READMEs) is left behind.
ALLOW_PATTERNS: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
IGNORE_PATTERNS: tuple[str, ...] = ("*/*",)  # no sub-folders (original/, onnx/, ...)


def selected_files(folder: Path) -> list[Path]:
    """Top-level files of a checkpoint folder that conversion needs (ALLOW_PATTERNS)."""
    return sorted(
        p for p in folder.iterdir() if p.is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in ALLOW_PATTERNS)
    )


def check_checkpoint_folder(folder: Path) -> None:
    """A folder conversion can use: a readable config.json and complete safetensors weights."""
    config = folder / "config.json"
    if not config.is_file():
        raise InvalidInputError(
            f"{folder} has no config.json, so it is not a Hugging Face checkpoint folder.",
            hint="Point at the folder that holds config.json and *.safetensors (save it with save_pretrained).",
        )
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInputError(f"Cannot read {config}: {error}.", hint="Make config.json readable, valid JSON.") from None
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        other = [p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".gguf")]
        extra = f" (found {', '.join(sorted(other)[:3])})" if other else ""
        raise InvalidInputError(
            f"{folder} has no *.safetensors weights{extra}.",
            hint="Save the model with save_pretrained(dir) (safetensors is the default), or use gguf:FILE for GGUF.",
        )
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError) as error:
            raise InvalidInputError(f"Cannot read {index}: {error}.", hint="Re-save the checkpoint.") from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise InvalidInputError(
                f"{folder} misses weight shards named in its index: {', '.join(missing[:3])}.",
                hint="Copy the whole checkpoint folder.",
            )
    for weight in weights:
        _check_safetensors_header(weight)


def _check_safetensors_header(path: Path) -> None:
    """Readable, and as long as its header says: catches truncated and non-safetensors files early."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if header_len <= 0 or 8 + header_len > size:
                raise ValueError("bad header length")
            header = json.loads(handle.read(header_len))
    except (OSError, ValueError, struct.error) as error:
        raise InvalidInputError(
            f"{path} is not a readable safetensors file ({error}).", hint="Re-save or re-download the checkpoint."
        ) from None
    end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + header_len + end > size:
        raise InvalidInputError(
            f"{path} is truncated: its header describes {8 + header_len + end} bytes, the file has {size}.",
            hint="Copy or download the file again.",
        )


__all__ = ["ALLOW_PATTERNS", "IGNORE_PATTERNS", "check_checkpoint_folder", "selected_files"]

"""Where artifacts live, and names that cannot escape build/."""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

from pipeline.core.errors import InvalidInputError

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def build_root() -> Path:
    """The artifact root: $PIPELINE_BUILD_DIR, else ./build."""
    return Path(os.environ.get("PIPELINE_BUILD_DIR", "build")).resolve()


def new_log_file(server: str) -> Path:
    """A fresh log file name for one server start: build/logs/<server>-<time>-<pid>-<random>.log (two starts in
    one second, or in two processes, never share one)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return build_root() / "logs" / f"{server}-{stamp}-{os.getpid()}-{uuid.uuid4().hex[:4]}.log"


def safe_name(name: str, *, what: str = "name") -> str:
    """A single path component made of [A-Za-z0-9._-]; '..', slashes and empty names are refused."""
    if not _SAFE_NAME.match(name) or name in {".", ".."} or ".." in name:
        raise InvalidInputError(
            f"Invalid {what} {name!r}: it must be one path component of letters, digits, '.', '_' or '-'.",
            hint="Pick a plain name such as 'smollm2-135m-instruct'; paths and '..' are not allowed.",
        )
    return name


def model_slug(source_name: str) -> str:
    """A readable folder name for a model, from a hub id, folder or file name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", source_name.strip().lower()).strip("-.")
    slug = re.sub(r"-{2,}", "-", slug)
    return safe_name(slug[:96] or "model", what="model name")


def model_dir(model: str, root: Path | None = None) -> Path:
    base = (root or build_root()).resolve()
    path = (base / safe_name(model, what="model name")).resolve()
    if base not in path.parents:
        raise InvalidInputError(f"Model folder {path} would be outside {base}.")
    return path


def stage_dir(model: str, stage: str, item: str | None = None, root: Path | None = None) -> Path:
    path = model_dir(model, root) / stage
    return path / safe_name(item, what=f"{stage} id") if item else path

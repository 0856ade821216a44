"""Where the Hugging Face Hub's cache is and whether the Hub may be reached, as the environment says when a stage
runs (download fetches with them; convert's resource estimate reads a hub model's config.json with them)."""

from __future__ import annotations

import os
from pathlib import Path


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as set now; huggingface_hub reads it only at import."""
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def hub_cache_dir() -> Path | None:
    """The hub cache as the environment says now (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub)."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return Path(os.path.expandvars(os.environ[name])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    return None  # the library's default

"""hf: sources: huggingface_hub ``snapshot_download`` of only what conversion needs into the shared HF
cache (HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE and HF_ENDPOINT honoured as set when the stage runs),
the disk checked first from the Hub's own listing, then the files copied out of the cache (checked
against their sha256) so build/ stays self-contained."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pipeline.core import resources
from pipeline.core.artifacts import sha256_file
from pipeline.hf.sources import ParsedSource
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.hf.folder import ALLOW_PATTERNS, IGNORE_PATTERNS, selected_files
from pipeline.hf.hub import hub_cache_dir, hub_offline
from pipeline.core.reporting import SILENT, Reporter

HUB_PACKAGES = ("huggingface_hub",)
GIB_F = float(1 << 30)


@contextmanager
def library_progress_bars(show: bool) -> Iterator[None]:
    """huggingface_hub's and transformers' own tqdm bars (per-file bytes, GGUF tensors) on stderr when
    show (the reporter's shows_progress: off under --json/--quiet and for library calls), else
    silenced and restored afterwards."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if show or are_progress_bars_disabled():
        yield
        return
    from transformers.utils import logging as hf_logging

    transformers_bars = hf_logging.is_progress_bar_enabled()
    disable_progress_bars()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        enable_progress_bars()
        if transformers_bars:
            hf_logging.enable_progress_bar()


def copy_snapshot(parsed: ParsedSource, snapshot_dir: Path, tmp: Path, reporter: Reporter) -> dict[str, Any]:
    """Copy a cached snapshot's files out of the HF cache, checking large files against their
    sha256 (their blob name); corrupt blobs are downloaded again when the Hub is reachable."""
    commit = snapshot_dir.name
    files = selected_files(snapshot_dir)
    if not (snapshot_dir / "config.json").is_file() or not any(p.name.endswith(".safetensors") for p in files):
        present = ", ".join(p.name for p in files[:5]) or "nothing"
        raise InvalidInputError(
            f"hf:{parsed.location} at {commit[:12]} has no config.json and *.safetensors to convert (got: {present}).",
            hint="Pick a repository that publishes safetensors weights (a transformers checkpoint), or a revision that has them.",
        )
    bad = _copy_verified(files, tmp, reporter)
    if bad:
        if hub_offline():
            raise StageFailedError(
                f"Cached file(s) of hf:{parsed.location} are corrupt (sha256 differs from the Hub's): {', '.join(bad)}.",
                hint=f"Unset HF_HUB_OFFLINE to fetch them again, or delete {snapshot_dir.parent.parent} from the cache.",
            )
        reporter.warn(f"cached file(s) corrupt ({', '.join(bad)}); downloading them again")
        snapshot_dir = snapshot(parsed, force_download=True, only=bad, reporter=reporter)
        still_bad = _copy_verified([snapshot_dir / name for name in bad], tmp, reporter)
        if still_bad:
            raise StageFailedError(
                f"hf:{parsed.location}: {', '.join(still_bad)} does not match its sha256 after a fresh download.",
                hint="Try again later; if it persists the file on the Hub is broken.",
            )
    return {"repo_id": parsed.location, "revision": parsed.revision or "main", "commit": commit}


def _copy_verified(files: list[Path], tmp: Path, reporter: Reporter) -> list[str]:
    """Copy cache files (resolving symlinks); return names whose content does not match their LFS
    blob name (the sha256 of the content for large files)."""
    bad = []
    with reporter.progress() as progress:
        task = progress.start("copy from HF cache", total=len(files))
        for path in files:
            target = tmp / path.name
            shutil.copyfile(path.resolve(), target)
            blob = path.resolve().name
            if re.fullmatch(r"[0-9a-f]{64}", blob) and sha256_file(target) != blob:
                bad.append(path.name)
            progress.advance(task)
    return bad


def snapshot(
    parsed: ParsedSource, *, force_download: bool, only: list[str] | None = None, reporter: Reporter = SILENT
) -> Path:
    """snapshot_download into the HF cache. Resumable per file: finished files stay in the cache and
    a re-run fetches only the missing ones (huggingface_hub 2.x resumes a dropped connection within
    the process; a half-written file of a killed process starts again). The token comes from
    HF_TOKEN or `hf auth login` inside huggingface_hub: we never read, print or store it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        IncompleteSnapshotError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    offline = hub_offline()
    cache = hub_cache_dir()
    repo, revision = parsed.location, parsed.revision
    where = f"hf:{repo}" + (f"@{revision}" if revision else "")
    reporter.info(f"hub: {where}{' (offline: cache only)' if offline else ''}")
    try:
        folder = snapshot_download(
            repo,
            revision=revision,
            cache_dir=cache,
            allow_patterns=only or list(ALLOW_PATTERNS),
            ignore_patterns=list(IGNORE_PATTERNS),
            local_files_only=offline,
            force_download=force_download,
            endpoint=os.environ.get("HF_ENDPOINT") or None,
        )
    except GatedRepoError:
        raise InvalidInputError(
            f"{where} is gated: it needs an accepted licence and a token.",
            hint=f"Accept the terms on https://huggingface.co/{repo}, then set HF_TOKEN (or run `hf auth login`).",
        ) from None
    except RevisionNotFoundError:
        raise InvalidInputError(
            f"Revision {revision!r} not found in {repo}.", hint="Use a branch, tag or commit the repository has (e.g. main)."
        ) from None
    except RepositoryNotFoundError:
        raise InvalidInputError(
            f"{where}: repository not found (or private and no valid token).",
            hint="Check the spelling; for a private repository set HF_TOKEN (or run `hf auth login`).",
        ) from None
    except IncompleteSnapshotError as error:
        raise InvalidInputError(f"{where}: {error}", hint=_not_cached_hint(offline)) from None
    except LocalEntryNotFoundError:
        raise InvalidInputError(_not_cached_message(repo, revision, cache, offline), hint=_not_cached_hint(offline)) from None
    except HfHubHTTPError as error:
        status = getattr(getattr(error, "response", None), "status_code", "?")
        raise StageFailedError(
            f"{where}: the Hub answered HTTP {status}.", hint="Try again later, or set HF_HUB_OFFLINE=1 to use the cache."
        ) from None
    except OSError as error:
        raise StageFailedError(
            f"{where}: download failed: {error}.",
            hint="Check disk space and the network, then re-run (files already fetched are kept).",
        ) from None
    return Path(folder)


def _not_cached_message(repo: str, revision: str | None, cache: Path | None, offline: bool) -> str:
    from huggingface_hub import constants

    cache_root = cache or Path(constants.HF_HUB_CACHE)
    repo_folder = cache_root / ("models--" + repo.replace("/", "--"))
    if repo_folder.is_dir() and revision:
        what = f"revision {revision!r} of {repo} is not in the Hugging Face cache {cache_root}"
    elif repo_folder.is_dir():
        what = f"{repo} is only partly in the Hugging Face cache {cache_root}"
    else:
        what = f"{repo} is not in the Hugging Face cache {cache_root}"
    return f"{what}{' and HF_HUB_OFFLINE is set' if offline else ' and the Hub could not be reached'}."


def _not_cached_hint(offline: bool) -> str:
    if offline:
        return "Unset HF_HUB_OFFLINE to download it, or point HF_HUB_CACHE at a cache that has it."
    return "Check the network (and HF_ENDPOINT), or set HF_HUB_CACHE to a cache that has the model."


def hub_listing(parsed: ParsedSource) -> list[Any]:
    """The files snapshot_download would fetch (ALLOW_PATTERNS, top level), with their sizes, as the
    Hub lists them (its tree API); empty when the Hub cannot be asked (offline, unreachable)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    if hub_offline():
        return []
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    try:
        entries = list(api.list_repo_tree(parsed.location, revision=parsed.revision, recursive=False))
    except (HfHubHTTPError, OSError, ValueError):
        return []  # snapshot_download meets the same problem and says what it is
    return [e for e in entries if getattr(e, "size", None) is not None and "/" not in e.path
            and any(fnmatch.fnmatch(e.path, pattern) for pattern in ALLOW_PATTERNS)]


def check_hub_disk(parsed: ParsedSource, out: Path) -> None:
    """Before fetching: the files not yet in the HF cache must fit its disk, and the copy into build/
    must fit there too (both on one filesystem: the sum). Sizes are the Hub's own listing."""
    from huggingface_hub import constants

    listed = hub_listing(parsed)
    if not listed:
        return
    cache = hub_cache_dir() or Path(constants.HF_HUB_CACHE)
    blobs = cache / ("models--" + parsed.location.replace("/", "--")) / "blobs"

    def cached(entry: Any) -> bool:
        blob = entry.lfs.sha256 if getattr(entry, "lfs", None) else entry.blob_id
        return (blobs / str(blob)).is_file()

    fetch = sum(int(e.size) for e in listed if not cached(e))
    copy = sum(int(e.size) for e in listed)
    what = f"hf:{parsed.location}"
    if resources.same_filesystem(cache, out):
        resources.check_disk(out, fetch + copy, free=resources.free_disk_bytes(out),
                   what=f"{what} ({fetch / GIB_F:.2f} GiB to fetch into the HF cache {cache}, {copy / GIB_F:.2f} GiB copied to {out})")
        return
    resources.check_disk(cache, fetch, free=resources.free_disk_bytes(cache), what=f"{what} in the HF cache {cache}")
    resources.check_disk(out, copy, free=resources.free_disk_bytes(out), what=f"the copy of {what} in {out}")


__all__ = ["check_hub_disk", "copy_snapshot", "hub_listing", "library_progress_bars", "snapshot"]

"""Artifact folders: atomic writes, manifests, content hashes, and the "same inputs: no-op" rule.

Every stage writes into a temporary sibling folder and renames it over the destination only when it
succeeded, so an interrupted or failed run never damages the artifact that stood there before.

Re-runs that scale: a manifest records every file's sha256 and size (`files`) and its mtime
(`mtimes_ns`). A no-op re-run compares size and mtime only (the 16 GB of an 8B model are not read
again); a file whose mtime differs, or that was written within RACY_S of its manifest (a same-size
rewrite within one timestamp tick keeps the mtime), is hashed. `pipeline --verify ...` (or
PIPELINE_VERIFY=1) hashes every file.

Leftovers of killed runs are found by lock files, not PIDs (a PID means nothing to another container
sharing the volume): each run holds an flock on `.<name>.lock-<token>` while its `.<name>.tmp-<token>`
(and `.old-<token>`) folders exist; the kernel drops the lock when the run dies, however it dies, and
the next run removes what an unlocked token left. flock works between containers on one host and, on
Linux, on NFS (emulated with byte-range locks).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

MANIFEST_NAME = "manifest.json"
_CHUNK = 1 << 20
RACY_S = 2.0  # files written this close before their manifest are hashed: mtime ticks can be coarse
_VERIFY = {"on": os.environ.get("PIPELINE_VERIFY", "") not in ("", "0", "false")}


def set_verify(on: bool) -> None:
    """Hash every file of an artifact when deciding a re-run is a no-op (`pipeline --verify`)."""
    _VERIFY["on"] = on


def verify_enabled() -> bool:
    return _VERIFY["on"]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_json(value: Any) -> str:
    """Hash of a JSON-able value with sorted keys: the identity of a stage's inputs."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def short_hash(value: Any, length: int = 10) -> str:
    return sha256_json(value)[:length]


def _files(folder: Path, exclude: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in exclude:
            yield rel, path


def file_inventory(folder: Path, *, exclude: tuple[str, ...] = (MANIFEST_NAME,)) -> dict[str, dict[str, Any]]:
    """sha256 and size of every regular file under folder, keyed by relative POSIX path (the content
    identity other stages hash: no timestamps in it)."""
    return {rel: {"sha256": sha256_file(path), "size": path.stat().st_size} for rel, path in _files(folder, exclude)}


def file_record(path: Path, known: Any = None) -> dict[str, Any]:
    """{"sha256", "size"} of one file: the sha256 a source manifest recorded for it (`known`, that manifest's
    entry) when the recorded size is the file's, else the file hashed (weights are gigabytes: hashed once)."""
    size = Path(path).stat().st_size
    if isinstance(known, dict) and known.get("size") == size and known.get("sha256"):
        return {"sha256": known["sha256"], "size": size}
    return {"sha256": sha256_file(path), "size": size}


def file_mtimes(folder: Path, *, exclude: tuple[str, ...] = (MANIFEST_NAME,)) -> dict[str, int]:
    """mtime (ns) of every regular file under folder: what a no-op re-run compares instead of hashing."""
    return {rel: path.stat().st_mtime_ns for rel, path in _files(folder, exclude)}


def folder_hash(folder: Path) -> str:
    """One hash of a folder's files (names, sizes and contents), ignoring its manifest."""
    return sha256_json(file_inventory(folder))


def source_revision(path: Path) -> str:
    """A cheap identity of an input folder: its manifest's recorded file hashes, else a full hash."""
    folder = path if path.is_dir() else path.parent
    manifest = read_manifest(folder)
    if manifest and manifest.get("files"):
        return sha256_json(manifest["files"])[:16]
    if path.is_file():
        return sha256_json(path.read_text(encoding="utf-8"))[:16]
    return folder_hash(folder)[:16]


def temporary_beside(path: Path, suffix: str = ".tmp") -> Path:
    """A fresh hidden name in `path`'s folder (made if missing) to write to before replacing `path` with it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{suffix}")


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    tmp = temporary_beside(path)
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a folder's entries (names created, renamed or removed in it) durable: a rename is only on
    disk once its folder is synced."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as error:  # a filesystem that cannot sync a folder (some FUSE mounts) says so: nothing to do
        if error.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """fsync every regular file under folder, then every folder bottom-up (folder itself last): what a
    stage wrote is on disk before the rename that publishes it."""
    folders = [folder]
    for path in Path(folder).rglob("*"):
        if path.is_symlink():
            continue
        if path.is_dir():
            folders.append(path)
        elif path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for each in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(each)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, not UTF-8, or not JSON: no manifest
        return None


def is_up_to_date(folder: Path, inputs_hash: str, *, verify_files: bool = True, verify: bool | None = None) -> bool:
    """True when folder holds a finished artifact made from the same inputs and its files are intact.

    Intact: every recorded file is there with its size; one whose mtime also matches (and was not written
    within RACY_S of the manifest) is taken as unchanged, any other is hashed. verify (default: `pipeline
    --verify` / PIPELINE_VERIFY) hashes every file; verify_files=False checks the manifest only.
    A pure check: it changes nothing on disk (a stage that owns the folder calls `reusable`)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if not manifest or manifest.get("inputs_hash") != inputs_hash:
        return False
    if not verify_files:
        return True
    hash_all = verify_enabled() if verify is None else verify
    try:
        racy_from = (folder / MANIFEST_NAME).stat().st_mtime_ns - int(RACY_S * 1e9)
    except OSError:
        return False
    recorded = manifest.get("files") or {}
    mtimes = manifest.get("mtimes_ns") or {}  # absent in manifests written before it was recorded: hash
    for rel, meta in recorded.items():
        path = folder / rel
        try:
            stat = path.stat()
        except OSError:
            return False
        if not path.is_file() or stat.st_size != meta.get("size"):
            return False
        mtime = mtimes.get(rel)
        unchanged = isinstance(mtime, int) and stat.st_mtime_ns == mtime and mtime < racy_from
        if (hash_all or not unchanged) and sha256_file(path) != meta.get("sha256"):
            return False
    return True


def reusable(folder: Path, inputs_hash: str) -> bool:
    """A stage's decision between a no-op and a rebuild of its own destination: leftovers of killed runs
    beside it are cleared (a no-op re-run must not keep them; a rebuild clears them too), then
    `is_up_to_date`. Only the stage that writes folder calls this; readers call is_up_to_date."""
    folder = Path(folder)
    if folder.parent.is_dir():
        _remove_stale_temporaries(folder)
    return is_up_to_date(folder, inputs_hash)


def tool_versions(*packages: str) -> dict[str, str]:
    """Installed versions of the named Python distributions (missing ones are left out)."""
    from importlib import metadata

    versions = {"python": sys.version.split()[0]}
    for name in ("trtllm-pipeline", *packages):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


@dataclass(frozen=True)
class ArtifactOrigin:
    """Where an artifact comes from: the stage that made it, the inputs it records, the hash of what
    decides its content (a no-op re-run compares it; it may cover more than `inputs` shows), and the
    packages whose versions made it."""

    stage: str
    inputs: Mapping[str, Any]
    inputs_hash: str
    packages: tuple[str, ...] = ()


def build_manifest(origin: ArtifactOrigin, folder: Path, started: float, *, extra: Mapping[str, Any] | None = None,
                   files: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The manifest of an artifact folder; `files` (default: file_inventory(folder)) lets a stage reuse
    hashes it already knows."""
    return {
        "stage": origin.stage,
        "inputs": dict(origin.inputs),
        "inputs_hash": origin.inputs_hash,
        "tool_versions": tool_versions(*origin.packages),
        "host": socket.gethostname(),
        "created_unix": time.time(),
        "duration_s": round(time.time() - started, 3),
        **(dict(extra) if extra else {}),
        "files": dict(files) if files is not None else file_inventory(folder),
        "mtimes_ns": file_mtimes(folder),
    }


def link_or_copy(source: Path, target: Path) -> str:
    """Hard-link source to target (replacing target), or copy it when the two are on different
    filesystems or links are not allowed; returns "linked" or "copied"."""
    if target.exists() or target.is_symlink():
        target.unlink()
    try:
        os.link(source, target)
        return "linked"
    except OSError:
        shutil.copy2(source, target)
        return "copied"


@contextmanager
def atomic_dir(destination: Path) -> Iterator[Path]:
    """Yield a fresh temporary folder beside destination; on success it replaces destination.

    On any exception (or a kill) the temporary folder is discarded and destination is untouched.
    The old artifact is moved aside and deleted only after the new one is in place. The run holds the
    lock `.<name>.lock-<token>` throughout, which marks its folders as alive to every other run.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(destination)
    token = uuid.uuid4().hex[:12]
    with _run_lock(destination, token):
        tmp = destination.with_name(f".{destination.name}.tmp-{token}")
        tmp.mkdir()
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_tree(tmp)  # the contents are on disk before the rename publishes them
        old = None
        if destination.exists():
            old = destination.with_name(f".{destination.name}.old-{token}")
            os.replace(destination, old)
        os.replace(tmp, destination)
        fsync_dir(destination.parent)  # the renames themselves are durable
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _lock_path(destination: Path, token: str) -> Path:
    return destination.with_name(f".{destination.name}.lock-{token}")


@contextmanager
def _run_lock(destination: Path, token: str) -> Iterator[None]:
    """Hold an exclusive flock on the run's lock file. The file is locked before it gets its name (made
    under a private name, locked, renamed), so no other run ever sees it unlocked while this run lives."""
    path = _lock_path(destination, token)
    private = destination.with_name(f".{destination.name}.lockinit-{token}")
    while True:
        fd = os.open(private, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.replace(private, path)
            break
        except FileNotFoundError:  # another run's clean-up took it in the instant before our flock: again
            os.close(fd)
    try:
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())  # for people; never read
        try:
            yield
        finally:
            _unlink(path)
    finally:
        _unlink(private)
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _held(lock: Path) -> bool | None:
    """True when a live run holds lock, False when nobody does (it is taken and kept by the caller until
    _release), None when the file is not there."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return True
    _HELD_BY_CLEANER[lock] = fd
    return False


_HELD_BY_CLEANER: dict[Path, int] = {}


def _release(lock: Path, *, delete: bool) -> None:
    fd = _HELD_BY_CLEANER.pop(lock, None)
    if delete:
        _unlink(lock)
    if fd is not None:
        os.close(fd)


def _remove_stale_temporaries(destination: Path) -> None:
    """Delete leftovers of dead runs: `.tmp-<token>` / `.old-<token>` folders whose lock nobody holds (or
    that have no lock file), unheld lock files, and unheld `.lockinit-<token>` files (a run killed between
    creating its lock file and renaming it; a live run holds the flock on it from the start). An orphaned `.old-` folder is put back when the
    destination itself is missing (its run died between the two renames)."""
    prefix = f".{destination.name}."
    for sibling in sorted(destination.parent.glob(f"{prefix}*")):
        rest = sibling.name[len(prefix):]
        kind, _, token = rest.partition("-")
        if kind == "lockinit" and token:
            if _held(sibling) is False:
                _release(sibling, delete=True)
            continue
        if kind not in ("tmp", "old", "lock") or not token:
            continue
        lock = _lock_path(destination, token)
        held = _held(lock)
        if held:
            continue
        try:
            if kind == "old" and sibling.is_dir() and not destination.exists():
                os.replace(sibling, destination)
            elif kind in ("tmp", "old"):
                shutil.rmtree(sibling, ignore_errors=True)
        finally:
            _release(lock, delete=held is False and not any(
                destination.with_name(f"{prefix}{k}-{token}").exists() for k in ("tmp", "old")))

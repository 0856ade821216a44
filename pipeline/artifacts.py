"""Artifact folders: atomic writes, manifests, content hashes, and the "same inputs: no-op" rule.

Every stage writes into a temporary sibling folder and renames it over the destination only when it
succeeded, so an interrupted or failed run never damages the artifact that stood there before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

MANIFEST_NAME = "manifest.json"
_CHUNK = 1 << 20


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


def file_inventory(folder: Path, *, exclude: tuple[str, ...] = (MANIFEST_NAME,)) -> dict[str, dict[str, Any]]:
    """sha256 and size of every regular file under folder, keyed by relative POSIX path."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(folder).as_posix()
        if rel in exclude:
            continue
        files[rel] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    return files


def folder_hash(folder: Path) -> str:
    """One hash of a folder's files (names, sizes and contents), ignoring its manifest."""
    return sha256_json(file_inventory(folder))


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def is_up_to_date(folder: Path, inputs_hash: str, *, verify_files: bool = True) -> bool:
    """True when folder holds a finished artifact made from the same inputs and its files are intact.
    Leftovers of killed runs beside it are cleared first (a no-op re-run must not keep them)."""
    if Path(folder).parent.is_dir():
        _remove_stale_temporaries(Path(folder))
    manifest = read_manifest(folder)
    if not manifest or manifest.get("inputs_hash") != inputs_hash:
        return False
    if not verify_files:
        return True
    recorded = manifest.get("files") or {}
    for rel, meta in recorded.items():
        path = folder / rel
        if not path.is_file() or path.stat().st_size != meta.get("size"):
            return False
        if sha256_file(path) != meta.get("sha256"):
            return False
    return True


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


def build_manifest(
    *,
    stage: str,
    inputs: Mapping[str, Any],
    inputs_hash: str,
    folder: Path,
    started: float,
    packages: tuple[str, ...] = (),
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "stage": stage,
        "inputs": dict(inputs),
        "inputs_hash": inputs_hash,
        "tool_versions": tool_versions(*packages),
        "host": socket.gethostname(),
        "created_unix": time.time(),
        "duration_s": round(time.time() - started, 3),
        **(dict(extra) if extra else {}),
        "files": file_inventory(folder),
    }


@contextmanager
def atomic_dir(destination: Path) -> Iterator[Path]:
    """Yield a fresh temporary folder beside destination; on success it replaces destination.

    On any exception (or a kill) the temporary folder is discarded and destination is untouched.
    The old artifact is moved aside and deleted only after the new one is in place.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(destination)
    tmp = destination.with_name(f".{destination.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if destination.exists():
        old = destination.with_name(f".{destination.name}.old-{uuid.uuid4().hex[:6]}")
        os.replace(destination, old)
    os.replace(tmp, destination)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale_temporaries(destination: Path) -> None:
    """Delete leftovers of killed runs (their process is gone). An orphaned `.old-` folder is put
    back when the destination itself is missing (killed between the two renames)."""
    prefix = f".{destination.name}."
    for sibling in destination.parent.glob(f"{prefix}*"):
        rest = sibling.name[len(prefix):]
        if rest.startswith("old-") and not destination.exists():
            os.replace(sibling, destination)
            continue
        if rest.startswith("tmp-"):
            pid_text = rest[4:].split("-", 1)[0]
            if pid_text.isdigit() and _pid_alive(int(pid_text)):
                continue
        if rest.startswith(("tmp-", "old-")):
            shutil.rmtree(sibling, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

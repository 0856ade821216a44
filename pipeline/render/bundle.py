"""Bundles: a rendered Triton repository that carries everything it serves, under one root.

`pipeline render` writes a bundle: the five models, the engine folder and the tokenizer, laid out the
way NVIDIA's tensorrtllm_backend examples lay out a repository (the engine in the `tensorrt_llm`
model's version folder); for a PyTorch-backend deployable, the one LLM-API model with the deployable's
files (model/, llm_api_options.yaml) in the same version folder, and model.yaml's `model` under ROOT
(pipeline/render/llmapi.py):

    ROOT/manifest.json                      the render manifest; records model_root
    ROOT/{preprocessing,postprocessing,ensemble,tensorrt_llm_bls}/...
    ROOT/tensorrt_llm/config.pbtxt          gpt_model_path = ROOT/tensorrt_llm/1
    ROOT/tensorrt_llm/1/                    the engine folder's files: config.json, rank<N>.engine
                                            (or the reference runtime's model/), manifest.json, ...
    ROOT/tensorrt_llm/1/tokenizer/          tokenizer_dir of every model

ROOT is the path the bundle has where it is served (`/models` in a pod; by default the folder it is
rendered into). Every path in every config starts with ROOT, so the folder can be moved, copied into
an image, synced to S3 or a PVC and served with nothing else present. Engine files are hard-linked
from the engine folder when both are on one filesystem, copied otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.artifacts import MANIFEST_NAME, file_record, link_or_copy, read_manifest
from pipeline.core.errors import InvalidInputError
from pipeline.render.model_repo import parse_model_config
from pipeline.hf.tokenizer import tokenizer_files

ENGINE_SUBDIR = "tensorrt_llm/1"
TOKENIZER_SUBDIR = f"{ENGINE_SUBDIR}/tokenizer"
# Parameters whose value is a path inside the serving image, not inside the bundle.
IMAGE_PATH_KEYS = {"executor_worker_path": "the tensorrtllm backend's worker binary, shipped in the Triton image"}


@dataclass(frozen=True)
class LinkStats:
    linked: int = 0
    copied: int = 0
    bytes: int = 0

    def add(self, how: str, size: int) -> "LinkStats":
        return LinkStats(self.linked + (how == "linked"), self.copied + (how == "copied"), self.bytes + size)


def engine_path(root: Path) -> Path:
    return Path(root) / ENGINE_SUBDIR


def tokenizer_path(root: Path) -> Path:
    return Path(root) / TOKENIZER_SUBDIR


def model_root(requested: Path | None, out: Path) -> Path:
    """The bundle's root: the given absolute path (not resolved: it names a place on the serving
    machine, such as /models), else the output folder itself."""
    if requested is None:
        return Path(out).resolve()
    if not Path(requested).is_absolute():
        raise InvalidInputError(
            f"--model-root {requested} is relative; it must be the absolute path the bundle will have where it is "
            "served.", hint="e.g. --model-root /models (Kubernetes), or leave it out to serve the bundle where it is written.")
    return Path(os.path.normpath(requested))


def check_out(out: Path, engine: Path, tokenizer: Path | None) -> None:
    """Refuse an output folder that would hold, or live inside, what the bundle is made from: the
    bundle replaces `out` as a whole when it is done."""
    out = Path(out).resolve()
    for what, source in (("engine folder", engine), ("tokenizer folder", tokenizer)):
        if source is None:
            continue
        source = Path(source).resolve()
        if out == source or source in out.parents:
            raise InvalidInputError(f"--out {out} is inside the {what} {source}.",
                                    hint="Write the bundle beside the engine, e.g. build/<model>/triton/<profile-id>/.")
        if out in source.parents:
            raise InvalidInputError(f"--out {out} contains the {what} {source}; rendering replaces --out as a whole.",
                                    hint="Pick an output folder that holds nothing else, e.g. build/<model>/triton/<profile-id>/.")


def _walk(folder: Path):
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path, path.relative_to(folder).as_posix()


def tree_identity(folder: Path, files: list[Path] | None = None) -> dict[str, Any]:
    """A cheap identity of an input folder: its manifest's inputs hash and recorded files when it has
    them (an engine `pipeline build` made), else name, size and mtime of every file (or of `files`)."""
    manifest = read_manifest(Path(folder)) or {}
    if manifest.get("inputs_hash") and manifest.get("files"):
        return {"inputs_hash": manifest["inputs_hash"], "files": manifest["files"]}
    paths = [(p, p.relative_to(folder).as_posix()) for p in files] if files is not None else list(_walk(folder))
    return {"stat": {rel: [p.stat().st_size, p.stat().st_mtime_ns] for p, rel in paths}}


def _sources(engine: Path, tokenizer: Path | None) -> list[tuple[Path, str]]:
    """(file, bundle-relative path) of everything add_engine brings in: the engine folder's files
    under tensorrt_llm/1/, and an outside tokenizer's files under its tokenizer/ (instead of the
    engine's own)."""
    files = [(path, f"{ENGINE_SUBDIR}/{rel}") for path, rel in _walk(engine)
             if not (tokenizer and rel.startswith("tokenizer/"))]
    if tokenizer:
        files += [(path, f"{TOKENIZER_SUBDIR}/{path.name}") for path in tokenizer_files(tokenizer)]
    return files


def add_engine(bundle: Path, engine: Path, tokenizer: Path | None = None) -> LinkStats:
    """Link (or copy) the engine folder into bundle/tensorrt_llm/1/ and an outside tokenizer into its
    tokenizer/."""
    stats = LinkStats()
    for path, rel in _sources(engine, tokenizer):
        destination = Path(bundle) / rel
        if destination.exists():
            raise InvalidInputError(f"{path} would overwrite {rel} of the rendered model.",
                                    hint="Remove that file from the engine folder; the name belongs to the repository.")
        destination.parent.mkdir(parents=True, exist_ok=True)
        stats = stats.add(link_or_copy(path, destination), path.stat().st_size)
    return stats


def assemble(bundle: Path, engine: Path, root: Path, tokenizer: Path | None = None) -> LinkStats:
    """add_engine, then path_problems: InvalidInputError when the bundle would not be self-contained."""
    stats = add_engine(bundle, engine, tokenizer)
    problems = path_problems(bundle, root)
    if problems:
        raise InvalidInputError("The rendered bundle is not self-contained:\n  " + "\n  ".join(problems),
                                hint="A template names a path outside the bundle; fix the templates (model_repo_templates/, "
                                "or PIPELINE_TEMPLATES_DIR). Nothing was written.")
    return stats


def path_problems(bundle: Path, root: Path) -> list[str]:
    """Every parameter of every config.pbtxt that is an absolute path, and the `model` of every LLM-API
    model.yaml, must lie under root and name something the bundle holds (except the IMAGE_PATH_KEYS,
    paths of the serving image)."""
    problems = []
    for config_path in sorted(Path(bundle).glob("*/config.pbtxt")):
        model = config_path.parent.name
        config = parse_model_config(config_path)
        for key, value in config.parameters.items():
            if key not in IMAGE_PATH_KEYS:
                problems += _path_problem(bundle, root, f"{model} parameter {key}", value.string_value)
    for model_yaml in sorted(Path(bundle).glob("*/*/model.yaml")):
        problems += _path_problem(bundle, root, f"{model_yaml.relative_to(bundle)} model", _yaml_model(model_yaml),
                                  required=True)
    return problems


def _yaml_model(path: Path) -> str:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return ""
    return str(data.get("model", "")) if isinstance(data, dict) else ""


def _path_problem(bundle: Path, root: Path, what: str, text: str, *, required: bool = False) -> list[str]:
    if not text.startswith("/"):
        return [f"{what} = {text!r} is not an absolute path under the bundle root {root}"] if required else []
    path = Path(text)
    if path != root and root not in path.parents:
        return [f"{what} = {text} is outside the bundle root {root}"]
    if not (Path(bundle) / path.relative_to(root)).exists():
        return [f"{what} = {text} names nothing in the bundle"]
    return []


def bundle_files(bundle: Path, engine: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file, reusing the hashes the engine's manifest recorded for the files
    linked from it (engines are gigabytes: they were hashed once, at build)."""
    recorded = (read_manifest(Path(engine)) or {}).get("files") or {}
    files: dict[str, dict[str, Any]] = {}
    for path, rel in _walk(bundle):
        if rel == MANIFEST_NAME:
            continue
        known = recorded.get(rel[len(ENGINE_SUBDIR) + 1:]) if rel.startswith(ENGINE_SUBDIR + "/") else None
        files[rel] = file_record(path, known)
    return files


def recorded_root(repo: Path) -> Path | None:
    """The model_root a bundle's manifest records (None for a repository rendered before bundles)."""
    manifest = read_manifest(Path(repo)) or {}
    root = (manifest.get("bundle") or {}).get("model_root")
    return Path(root) if manifest.get("stage") == "render" and root else None


def check_location(repo: Path) -> None:
    """Refuse to serve a bundle from anywhere but its root: its configs name files under that root."""
    root = recorded_root(repo)
    if root is None:
        return
    try:
        same = Path(root).exists() and os.path.samefile(root, repo)
    except OSError:
        same = False
    if not same:
        raise InvalidInputError(
            f"The bundle at {Path(repo).resolve()} was rendered for {root}: every path in its configs starts there, "
            f"so it must be served from {root}.",
            hint=f"Move or mount it at {root}, or render it again for where it is: "
            f"`pipeline render --engine <engine> --model-root {Path(repo).resolve()}`.")


def describe(root: Path, stats: LinkStats) -> dict[str, Any]:
    return {"model_root": str(root), "engine_dir": ENGINE_SUBDIR, "tokenizer_dir": TOKENIZER_SUBDIR,
            "linked_files": stats.linked, "copied_files": stats.copied, "bytes": stats.bytes}


def summary(repo: Path) -> dict[str, Any]:
    return dict((read_manifest(Path(repo)) or {}).get("bundle") or {})


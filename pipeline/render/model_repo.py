"""What every Triton model repository pipeline render writes has in common (the TensorRT-engine
layout in pipeline.render, the LLM-API layout in pipeline.render.llmapi): the installed templates, where
a repository goes, the result, and reading config.pbtxt back as Triton's ModelConfig protobuf."""

from __future__ import annotations

import importlib.resources
import os
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from pipeline.core.artifacts import sha256_file, sha256_json
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.core.paths import build_root, safe_name

Runtime = Literal["tensorrtllm", "reference", "llmapi"]  # llmapi: a PyTorch-backend deployable (llmapi_repo.py)
LEFTOVER_MARKERS = ("${", "{{", "{%")  # template syntax that must not survive into a rendered repository
# The module every Python model imports from beside its model.py (model_repo_templates/pipeline_model_support.py).
MODEL_SUPPORT = "pipeline_model_support.py"


class RenderResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    repo: Path
    runtime: Runtime
    models: list[str]
    max_batch_size: int
    engine: Path
    tokenizer: Path
    checks: dict[str, str]
    notes: list[str] = []
    reused: bool
    duration_s: float
    model_root: Path
    bundle: dict


def package_folder(package: str, what: str, override: str) -> Path:
    try:
        folder = importlib.resources.files(package)
    except ModuleNotFoundError as error:
        raise StageFailedError(f"The installed pipeline has no {what} (package {package} is missing).",
                               hint=f"Reinstall the pipeline (`make install`, or `pip install .`), or set {override}.") from error
    if not isinstance(folder, Path):
        raise StageFailedError(f"The {what} of the installed pipeline are not on the filesystem ({folder}).",
                               hint=f"Install the pipeline unzipped (pip does), or set {override}.")
    return folder


def templates_dir() -> Path:
    """$PIPELINE_TEMPLATES_DIR, else the installed package pipeline.model_repo_templates (a checkout's
    model_repo_templates/ through the editable install)."""
    override = os.environ.get("PIPELINE_TEMPLATES_DIR")
    path = Path(override) if override else package_folder("pipeline.model_repo_templates", "model repository templates",
                                                           "PIPELINE_TEMPLATES_DIR")
    if not (path / "ensemble" / "config.pbtxt.j2").is_file():
        raise StageFailedError(f"Model repository templates not found in {path}.",
                               hint="Reinstall the pipeline, or point PIPELINE_TEMPLATES_DIR at a model_repo_templates/ folder.")
    return path


def copy_python_model(templates: Path, model_py: Path, version_dir: Path) -> None:
    """model.py into a model's version folder, and beside it the support module it imports (the image's Python
    has no pipeline to import it from)."""
    support = templates / MODEL_SUPPORT
    if not support.is_file():
        raise StageFailedError(f"The template folder {templates} has no {MODEL_SUPPORT} (the Python models import it).",
                               hint="Restore it from model_repo_templates/, or unset PIPELINE_TEMPLATES_DIR.")
    shutil.copy2(model_py, version_dir / "model.py")
    shutil.copy2(support, version_dir / MODEL_SUPPORT)


def templates_hash(templates: Path) -> str:
    """Names and contents of the template files (bytecode caches and the package marker left out)."""
    return sha256_json({path.relative_to(templates).as_posix(): sha256_file(path)
                        for path in sorted(templates.rglob("*"))
                        if path.is_file() and "__pycache__" not in path.parts and path.name != "__init__.py"})


def default_out_dir(engine: Path) -> Path:
    engine = Path(engine).resolve()
    if engine.parent.name != "engines":
        raise InvalidInputError(f"Cannot tell the model and profile of {engine}: it is not under build/<model>/engines/.",
                                hint="Pass --out DIR for the rendered repository.")
    model, profile_id = safe_name(engine.parents[1].name, what="model name"), safe_name(engine.name, what="profile id")
    root = engine.parents[2] if engine.parents[2] else build_root()
    return root / model / "triton" / profile_id


def parse_model_config(path: Path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), config)
    except text_format.ParseError as error:
        raise StageFailedError(f"{path} does not parse as a Triton ModelConfig: {error}.",
                               hint="A template renders invalid protobuf text; fix it in model_repo_templates/.") from error
    return config


def tensor_signature(tensor, is_input: bool) -> dict[str, str]:
    from tritonclient.grpc import model_config_pb2

    dims = "[" + ", ".join(str(d) for d in tensor.dims) + "]"
    return {
        "data_type": model_config_pb2.DataType.Name(tensor.data_type),
        "dims": dims,
        "optional": ("yes" if tensor.optional else "no") if is_input else "no",
        "allow_ragged_batch": ("yes" if tensor.allow_ragged_batch else "no") if is_input else "no",
        "reshape": ("[" + ", ".join(str(d) for d in tensor.reshape.shape) + "]") if tensor.HasField("reshape") else "",
    }

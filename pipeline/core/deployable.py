"""Names shared by the stages that write and read TensorRT-LLM PyTorch-backend artifacts.

A PyTorch-backend deployable has no engine: it is a ModelOpt unified HF checkpoint (hard-linked
into `model/`) and the LLM-API options the planner chose (`llm_api_options.yaml`, the file
`trtllm-serve --extra_llm_api_options` reads and the Triton LLM-API model's `model.yaml` carries)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.core.artifacts import read_manifest

CheckpointFormat = Literal["trtllm", "hf"]
Backend = Literal["tensorrt", "pytorch"]

TRTLLM_FORMAT: CheckpointFormat = "trtllm"
HF_FORMAT: CheckpointFormat = "hf"
HF_CHECKPOINT_PREFIX = "hf-"  # checkpoint ids of --format hf start with this

MODEL_SUBDIR = "model"
OPTIONS_FILE = "llm_api_options.yaml"

PYTORCH_BACKEND: Backend = "pytorch"
TENSORRT_BACKEND: Backend = "tensorrt"
DEFAULT_BACKEND: Backend = TENSORRT_BACKEND

# What the PyTorch backend path takes (`pipeline convert --format hf`): weight and KV-cache precisions.
HF_QUANT_FORMATS = ("fp16", "bf16", "fp8", "nvfp4", "int4_awq", "w4a8_awq")
HF_KV_CACHE_FORMATS = ("auto", "fp8")


def _manifest(folder: Path) -> dict[str, Any]:
    manifest = read_manifest(folder)
    return manifest if isinstance(manifest, dict) else {}


def _is_deployable(folder: Path, manifest: dict[str, Any]) -> bool:
    return (manifest.get("stage") == "build" and manifest.get("backend") == PYTORCH_BACKEND
            and (folder / OPTIONS_FILE).is_file() and (folder / MODEL_SUBDIR).is_dir())


def is_pytorch_deployable(folder: Path) -> bool:
    """A folder `pipeline build --backend pytorch` wrote: its manifest says so and the options file exists."""
    folder = Path(folder)
    return _is_deployable(folder, _manifest(folder))


@dataclass(frozen=True)
class Deployable:
    """A PyTorch-backend deployable as render, serve and k8s read it.

    runtime: "pytorch" (TensorRT-LLM's LLM API on a GPU) or "reference" (the CPU reference runtime).
    options: the LLM-API options (the same dict as llm_api_options.yaml).
    simulated: for the reference runtime, the precision (quant, kv_cache) it simulates with ModelOpt fake
    quantization when it loads model/ (model/ then holds the 16-bit source weights); None otherwise.
    """

    path: Path
    manifest: dict[str, Any]
    options: dict[str, Any]

    @property
    def model_dir(self) -> Path:
        return self.path / MODEL_SUBDIR

    @property
    def options_path(self) -> Path:
        return self.path / OPTIONS_FILE

    @property
    def runtime(self) -> str:
        return str(self.manifest.get("runtime") or PYTORCH_BACKEND)

    @property
    def is_cpu(self) -> bool:
        return self.runtime == "reference"

    @property
    def gpu(self) -> str:
        return str((self.manifest.get("gpu") or {}).get("key") or "")

    @property
    def env(self) -> dict[str, str]:
        """Environment variables the serving process needs (the build's choice, e.g. TRTLLM_LOAD_KV_SCALES=1)."""
        return {str(k): str(v) for k, v in (self.manifest.get("env") or {}).items()}

    @property
    def simulated(self) -> tuple[str, str] | None:
        sim = self.manifest.get("simulated")
        return (str(sim["quant"]), str(sim["kv_cache"])) if isinstance(sim, dict) else None


def read_deployable(folder: Path) -> Deployable:
    """The deployable in folder (manifest + options); InvalidInputError (exit 2) when it is not one."""
    import yaml

    from pipeline.core.errors import InvalidInputError

    folder = Path(folder)
    manifest = _manifest(folder)
    if not _is_deployable(folder, manifest):
        raise InvalidInputError(
            f"{folder} is not a PyTorch-backend deployable (no manifest with backend \"pytorch\", "
            f"{OPTIONS_FILE} and {MODEL_SUBDIR}/).",
            hint="Build one with `pipeline build --backend pytorch --checkpoint build/<model>/checkpoints/hf-<id> --gpu G`.",
        )
    try:
        options = yaml.safe_load((folder / OPTIONS_FILE).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InvalidInputError(f"Cannot read {folder / OPTIONS_FILE}: {error}.",
                                hint="Build the deployable again (`pipeline build --backend pytorch ... --force`).") from None
    if not isinstance(options, dict) or options != manifest.get("options"):
        raise InvalidInputError(f"{folder / OPTIONS_FILE} differs from the options its manifest records.",
                                hint="Build the deployable again (`pipeline build --backend pytorch ... --force`).")
    return Deployable(path=folder.resolve(), manifest=manifest, options=options)

"""What `build` reads from its input folder: the model's shapes, its precision and its parallel layout.

Two kinds of input are accepted:

- a TensorRT-LLM checkpoint (`pipeline convert` output: config.json with `architecture`,
  `quantization.quant_algo` / `kv_cache_quant_algo` and `mapping`, plus rank<N>.safetensors):
  the precision and tp/pp come from it and cannot be overridden;
- a Hugging Face folder (config.json with `architectures`): what the reference runtime serves
  (`--gpu cpu`), and for a GPU only a *plan* (`--dry-run`) with the precision given by `--quant`,
  because trtllm-build needs a converted checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipeline.core.artifacts import MANIFEST_NAME, read_manifest, source_revision
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.planner import ModelSpec, model_spec_from_config, model_spec_from_dict
from pipeline.core.paths import build_root, model_slug
from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS, kv_cache_format, quant_format

class CheckpointInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path
    kind: Literal["trtllm", "hf"]
    model: str
    revision: str
    architecture: str
    shape: ModelSpec
    quant: str
    kv_cache: str
    tp: int = 1
    pp: int = 1
    hf_dir: Path | None = None  # the HF folder behind it (the folder itself for kind "hf")


def _read_config(path: Path) -> dict[str, Any]:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise InvalidInputError(
            f"No checkpoint at {path}: {config_path.name} is missing.",
            hint="Pass --checkpoint build/<model>/checkpoints/<id> (from `pipeline convert`) or, for --gpu cpu, "
            "build/<model>/hf (from `pipeline download`).",
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidInputError(f"Cannot read {config_path}: {error}.",
                                hint="Re-run the stage that wrote it (`pipeline convert` or `pipeline download`).") from None
    if not isinstance(config, dict):
        raise InvalidInputError(f"{config_path} is not a JSON object.")
    return config


def _trtllm_shape(config: dict[str, Any], name: str) -> ModelSpec:
    """The planner's ModelSpec from a TensorRT-LLM checkpoint config: its own key names put in HF's."""
    hf_names = {
        **config, "model_type": config.get("architecture", "unknown"),
        "head_dim": config.get("head_size") or config.get("head_dim"),
        "tie_word_embeddings": config.get("share_embedding_table", config.get("tie_word_embeddings", False)),
        "torch_dtype": config.get("dtype"), "attention_bias": False, "mlp_bias": False,
    }
    try:
        return model_spec_from_dict(hf_names, name, source="the TensorRT-LLM checkpoint config")
    except (UnsupportedError, TypeError, ValueError) as error:
        raise InvalidInputError(
            f"The TensorRT-LLM checkpoint config lacks a field the build needs ({error}).",
            hint="Convert again with `pipeline convert`; the config needs hidden_size, num_hidden_layers, "
            "num_attention_heads and vocab_size.",
        ) from None


def quant_name_of(quant_algo: str | None, dtype: str = "float16") -> str:
    """Our --quant name for a checkpoint's quant_algo (None: 16-bit weights in the checkpoint's dtype)."""
    if not quant_algo:
        return "bf16" if dtype == "bfloat16" else "fp16"
    for fmt in QUANT_FORMATS.values():
        if fmt.quant_algo and fmt.quant_algo == quant_algo:
            return fmt.name
    if quant_algo.startswith("W8A8_SQ_PER_CHANNEL"):  # the _PER_TOKEN_PLUGIN variants
        return "int8_sq"
    raise UnsupportedError(
        f"The checkpoint's quant_algo {quant_algo!r} is not one this pipeline builds.",
        hint=f"Convert with one of: {', '.join(QUANT_FORMATS)}.",
    )


def kv_name_of(kv_algo: str | None) -> str:
    """Our --kv-cache name for a checkpoint's kv_cache_quant_algo (None: the model's 16-bit dtype)."""
    if not kv_algo:
        return "auto"
    for fmt in KV_CACHE_FORMATS.values():
        if fmt.kv_cache_quant_algo == kv_algo:
            return fmt.name
    raise UnsupportedError(f"The checkpoint's kv_cache_quant_algo {kv_algo!r} is not one this pipeline builds.",
                           hint=f"Convert with --kv-cache {' or '.join(KV_CACHE_FORMATS)}.")


def model_name_for(path: Path, given: str | None = None) -> str:
    """The model folder name: given, else the <model> of build/<model>/<stage>/..., else the <model> of the pipeline's
    own layout under another build root (<model>/hf, <model>/checkpoints/<id>: a download or a conversion made elsewhere,
    as planner.calibrate.model_identity names it), else the folder's name."""
    if given:
        return model_slug(given)
    resolved = path.resolve()
    root = build_root()
    if root in resolved.parents:
        return resolved.relative_to(root).parts[0]
    folder = resolved if resolved.is_dir() else resolved.parent
    if folder.name == "hf":
        folder = folder.parent
    elif folder.parent.name == "checkpoints":
        folder = folder.parent.parent
    return model_slug(folder.name)


def hf_source_of(trtllm_dir: Path) -> Path | None:
    """The HF folder a TensorRT-LLM checkpoint was converted from: a path in its manifest's inputs,
    else build/<model>/hf beside build/<model>/checkpoints/<id>."""
    manifest = read_manifest(trtllm_dir) or {}
    candidates: list[Any] = []
    inputs = manifest.get("inputs") or {}
    for key in ("hf_dir", "source_dir", "hf", "source", "model_dir", "model"):
        candidates.append(inputs.get(key))
        candidates.append(manifest.get(key))
    candidates.append(trtllm_dir.resolve().parent.parent / "hf")
    for value in candidates:
        if isinstance(value, (str, Path)) and value:
            folder = Path(value)
            if folder.is_dir() and (folder / "config.json").is_file() and folder != trtllm_dir:
                return folder.resolve()
    return None


def read_checkpoint(
    path: Path,
    *,
    model: str | None = None,
    quant: str | None = None,
    kv_cache: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
) -> CheckpointInfo:
    """Read a TensorRT-LLM checkpoint or an HF folder / config.json. For a TensorRT-LLM checkpoint,
    quant/kv/tp/pp given by the user must agree with what the checkpoint holds."""
    path = Path(path)
    config = _read_config(path)
    folder = path if path.is_dir() else path.parent
    if "architecture" in config and ("quantization" in config or "mapping" in config):
        quantization = config.get("quantization") or {}
        mapping = config.get("mapping") or {}
        held = {
            "quant": quant_name_of(quantization.get("quant_algo"), str(config.get("dtype", "float16"))),
            "kv_cache": kv_name_of(quantization.get("kv_cache_quant_algo")),
            "tp": int(mapping.get("tp_size", 1)),
            "pp": int(mapping.get("pp_size", 1)),
        }
        asked = {"quant": quant and quant_format(quant).name, "kv_cache": kv_cache and kv_cache_format(kv_cache).name,
                 "tp": tp, "pp": pp}
        for key, value in asked.items():
            if value is not None and value != held[key]:
                raise InvalidInputError(
                    f"--{key.replace('_', '-')} {value} disagrees with the checkpoint at {path}, which holds "
                    f"{key}={held[key]}.",
                    hint=f"Drop the option (the checkpoint decides it) or convert again with "
                    f"`pipeline convert --{key.replace('_', '-')} {value}`.",
                )
        name = model_name_for(folder, model)
        return CheckpointInfo(
            path=folder.resolve(), kind="trtllm", model=name, revision=source_revision(folder),
            architecture=str(config["architecture"]), shape=_trtllm_shape(config, name), hf_dir=hf_source_of(folder), **held,
        )
    if "architectures" in config or "model_type" in config:
        return CheckpointInfo(
            path=folder.resolve(), kind="hf", model=model_name_for(folder, model),
            revision=source_revision(path if path.is_file() else folder),
            architecture=str((config.get("architectures") or [config.get("model_type", "unknown")])[0]),
            shape=model_spec_from_config(path),
            quant=quant_format(quant or "fp16").name, kv_cache=kv_cache_format(kv_cache).name,
            tp=tp or 1, pp=pp or 1, hf_dir=folder.resolve(),
        )
    raise InvalidInputError(
        f"{path} is neither a TensorRT-LLM checkpoint nor a Hugging Face folder.",
        hint="A TensorRT-LLM checkpoint's config.json has `architecture` and `quantization`; an HF one has `architectures`.",
    )


def find_checkpoint(model: str, *, quant: str, kv_cache: str | None, tp: int, pp: int) -> Path:
    """The newest build/<model>/checkpoints/<id>/ holding the asked precision and layout."""
    from pipeline.core.paths import stage_dir

    base = stage_dir(model, "checkpoints")
    want = (quant_format(quant).name, kv_cache_format(kv_cache).name, tp, pp)
    found: list[tuple[float, Path]] = []
    for folder in sorted(base.glob("*")) if base.is_dir() else []:
        if not (folder / "config.json").is_file() or not (folder / MANIFEST_NAME).is_file():
            continue
        if checkpoint_format(folder) != "trtllm":  # an HF checkpoint (`convert --format hf`): the PyTorch backend's
            continue
        try:
            info = read_checkpoint(folder)
        except InvalidInputError:
            continue
        if (info.quant, info.kv_cache, info.tp, info.pp) == want:
            found.append(((folder / MANIFEST_NAME).stat().st_mtime, folder))
    if not found:
        raise InvalidInputError(
            f"No {want[0]} checkpoint (KV {want[1]}, tp {tp}, pp {pp}) for model {model!r} under {base}.",
            hint=f"Run `pipeline convert --model {model} --quant {want[0]}"
            f"{'' if want[1] == 'auto' else ' --kv-cache ' + want[1]} --tp {tp} --pp {pp}` first, or pass --checkpoint DIR.",
        )
    return max(found)[1]


HF_QUANT_CONFIG = "hf_quant_config.json"  # ModelOpt's export_hf_checkpoint writes the precision here


def checkpoint_format(folder: Path) -> str:
    """"hf" or "trtllm": the manifest's top-level `format` (`pipeline convert --format`), else what
    config.json looks like (a TensorRT-LLM config has `architecture` with `quantization`/`mapping`)."""
    from pipeline.core.deployable import HF_FORMAT, TRTLLM_FORMAT

    folder = Path(folder)
    folder = folder if folder.is_dir() else folder.parent
    recorded = (read_manifest(folder) or {}).get("format")
    if recorded in (HF_FORMAT, TRTLLM_FORMAT):
        return str(recorded)
    config = _read_config(folder)
    return TRTLLM_FORMAT if "architecture" in config and ("quantization" in config or "mapping" in config) else HF_FORMAT


def is_converted_hf(folder: Path) -> bool:
    """An HF checkpoint `pipeline convert --format hf` wrote (its manifest says format "hf")."""
    from pipeline.core.deployable import HF_FORMAT

    folder = Path(folder)
    return (read_manifest(folder if folder.is_dir() else folder.parent) or {}).get("format") == HF_FORMAT


def hf_precision(folder: Path) -> tuple[str, str]:
    """(quant, kv_cache) an HF checkpoint holds: ModelOpt's hf_quant_config.json (or the
    `quantization_config` it also puts in config.json), else 16-bit weights in config.json's dtype."""
    folder = Path(folder)
    folder = folder if folder.is_dir() else folder.parent
    config = _read_config(folder)
    quantization: dict[str, Any] = {}
    path = folder / HF_QUANT_CONFIG
    if path.is_file():
        try:
            quantization = dict(json.loads(path.read_text(encoding="utf-8")).get("quantization") or {})
        except (OSError, ValueError, AttributeError) as error:
            raise InvalidInputError(f"Cannot read {path}: {error}.", hint="Convert again with `pipeline convert --format hf`.") from None
    elif isinstance(config.get("quantization_config"), dict):
        quantization = dict(config["quantization_config"])
        if "quant_algo" not in quantization:
            method = quantization.get("quant_method", "unknown")
            raise UnsupportedError(
                f"{folder} is quantized with {method!r}, which this pipeline does not plan for.",
                hint="Start from the 16-bit model and quantize with `pipeline convert --format hf --quant fp8` "
                "(or nvfp4, int4_awq, w4a8_awq).",
            )
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "float16")
    return quant_name_of(quantization.get("quant_algo"), dtype), kv_name_of(quantization.get("kv_cache_quant_algo"))


def read_source(path: Path, *, model: str | None = None) -> CheckpointInfo:
    """read_checkpoint, with an HF folder's precision read from the folder itself (hf_precision)."""
    info = read_checkpoint(path, model=model)
    if info.kind != "hf":
        return info
    quant, kv = hf_precision(info.path)
    return info.model_copy(update={"quant": quant, "kv_cache": kv})


def find_hf_checkpoint(model: str, quant: str | None, kv_cache: str | None) -> Path:
    """The newest build/<model>/checkpoints/hf-*/ holding the asked precision, else the model's hf/
    folder (`pipeline download`): 16-bit weights, which the reference runtime serves with the asked
    precision simulated, and which a GPU plan (--dry-run) can start from."""
    from pipeline.core.deployable import HF_CHECKPOINT_PREFIX
    from pipeline.core.paths import stage_dir

    want_kv = kv_cache_format(kv_cache).name
    want = {quant_format(quant).name} if quant else {"fp16", "bf16"}  # no --quant: 16-bit, as the engine path
    found = []
    for folder in sorted(stage_dir(model, "checkpoints").glob(f"{HF_CHECKPOINT_PREFIX}*")):
        if (folder / "config.json").is_file() and (folder / MANIFEST_NAME).is_file():
            held = hf_precision(folder)
            if held[0] in want and held[1] == want_kv:
                found.append(((folder / MANIFEST_NAME).stat().st_mtime, folder))
    if found:
        return max(found)[1]
    hf_dir = stage_dir(model, "hf")
    if (hf_dir / "config.json").is_file():
        return hf_dir
    raise InvalidInputError(
        f"No {quant or '16-bit'} HF checkpoint (KV {want_kv}) for model {model!r} under {stage_dir(model, 'checkpoints')}.",
        hint=f"Run `pipeline convert --model {model} --quant {quant or 'fp16'}{'' if want_kv == 'auto' else ' --kv-cache ' + want_kv}"
        " --format hf` first, or pass --checkpoint DIR.",
    )

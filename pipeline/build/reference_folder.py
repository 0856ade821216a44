"""The reference runtime's engine folder: what `render` reads for `--runtime reference` (the folder's
layout; the runtime that serves it is pipeline/reference_runtime/engine.py).

Same shape as a `trtllm-build` output folder so that render reads both the same way:

    <engine>/config.json     {"version", "pretrained_config", "build_config": {...}, "runtime": "reference"}
    <engine>/model/          the HF checkpoint (hard links where the filesystem allows, else copies)
    <engine>/tokenizer/      tokenizer files
    <engine>/manifest.json   (written by the build stage; may hold {"profile": {...}})

`pipeline build --gpu cpu` owns the stage (hashing, manifest, atomic rename); this module only lays
out the files, so the build stage and the tests produce the same folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from pipeline.core.artifacts import link_or_copy
from pipeline.core.errors import InvalidInputError
from pipeline.hf.tokenizer import TOKENIZER_FILES

REFERENCE_RUNTIME = "reference"

DEFAULT_BUILD_CONFIG: dict[str, Any] = {
    "max_batch_size": 8,
    "max_input_len": 1024,
    "max_seq_len": 2048,
    "max_num_tokens": 8192,
    "max_beam_width": 1,
    "plugin_config": {"paged_kv_cache": True, "tokens_per_block": 32},
}

_WEIGHT_SUFFIXES = (".safetensors", ".json", ".bin", ".jinja", ".model", ".txt")


def merged_build_config(build_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """DEFAULT_BUILD_CONFIG updated with the given keys (plugin_config merged one level deep)."""
    merged = json.loads(json.dumps(DEFAULT_BUILD_CONFIG))
    for key, value in (build_config or {}).items():
        if key == "plugin_config" and isinstance(value, Mapping):
            merged["plugin_config"].update(value)
        else:
            merged[key] = value
    if merged["max_input_len"] >= merged["max_seq_len"]:
        raise InvalidInputError(
            f"max_input_len ({merged['max_input_len']}) must be smaller than max_seq_len ({merged['max_seq_len']}).",
            hint="Leave room for at least one generated token, e.g. max_input_len 1024 with max_seq_len 2048.",
        )
    return merged


def write_reference_engine_dir(
    hf_dir: Path,
    out_dir: Path,
    build_config: Mapping[str, Any] | None = None,
    *,
    simulated_quant: tuple[str, str] = ("fp16", "auto"),
) -> Path:
    """Lay out a reference-runtime engine folder from an HF checkpoint folder; returns out_dir.

    out_dir is written in place (the caller wraps it in atomic_dir); an existing config.json there is
    replaced. build_config keys override DEFAULT_BUILD_CONFIG. simulated_quant (format, KV cache) is
    recorded under pretrained_config.quantization; the runtime simulates it when it loads the model.
    """
    from pipeline.core.quant import kv_cache_format, quant_format

    quant, kv = quant_format(simulated_quant[0]), kv_cache_format(simulated_quant[1])
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    hf_config_path = hf_dir / "config.json"
    if not hf_config_path.is_file():
        raise InvalidInputError(
            f"{hf_dir} is not a Hugging Face checkpoint folder (no config.json).",
            hint="Point at the folder `pipeline download` wrote (build/<model>/hf/).",
        )
    if not any(hf_dir.glob("*.safetensors")) and not any(hf_dir.glob("*.bin")):
        raise InvalidInputError(
            f"{hf_dir} holds no weights (*.safetensors or *.bin).",
            hint="Download the checkpoint again; GGUF sources must be converted to an HF folder first.",
        )
    pretrained = json.loads(hf_config_path.read_text(encoding="utf-8"))
    model_dir, tokenizer_dir = out_dir / "model", out_dir / "tokenizer"
    model_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    for source in sorted(hf_dir.iterdir()):
        if source.is_file() and source.name.endswith(_WEIGHT_SUFFIXES) and source.name != "manifest.json":
            link_or_copy(source, model_dir / source.name)
        if source.is_file() and source.name in TOKENIZER_FILES:
            link_or_copy(source, tokenizer_dir / source.name)
    if not (tokenizer_dir / "tokenizer.json").is_file() and not (tokenizer_dir / "tokenizer.model").is_file():
        raise InvalidInputError(
            f"{hf_dir} has no tokenizer (tokenizer.json or tokenizer.model).",
            hint="Download the checkpoint with its tokenizer files.",
        )
    config = {
        "version": "reference",
        "runtime": REFERENCE_RUNTIME,
        "pretrained_config": {
            "architecture": (pretrained.get("architectures") or [pretrained.get("model_type", "unknown")])[0],
            "dtype": str(pretrained.get("dtype") or pretrained.get("torch_dtype") or "float32"),
            "vocab_size": pretrained.get("vocab_size"),
            "max_position_embeddings": pretrained.get("max_position_embeddings"),
            "hf_model_type": pretrained.get("model_type"),
            "quantization": {
                "quant_algo": quant.quant_algo,
                "kv_cache_quant_algo": kv.kv_cache_quant_algo,
                "simulated": {"quant": quant.name, "kv_cache": kv.name},
            },
        },
        "build_config": merged_build_config(build_config),
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out_dir


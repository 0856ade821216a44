"""gguf: sources: a GGUF file dequantized through transformers and written as an HF checkpoint
(float32 safetensors, config, generation config, tokenizer), and what that takes on disk, read from
the GGUF header alone."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from pipeline.core.errors import StageFailedError
from pipeline.core.reporting import Reporter

# GGUF weights are stored as float32. The demo GGUF is Q4_1: each weight is d*q + m with float16 d
# and m, so the exact dequantized value needs more mantissa bits than float16 has; float32 keeps it
# bit-exact (convert then casts to fp16/bf16 itself, once). float32 is also what the CPU reference
# runtime computes in, and it doubles a 135M model to only ~540 MB.
GGUF_DTYPE = "float32"
# Bump when the GGUF conversion changes, so existing artifacts are redone.
GGUF_CONVERTER_VERSION = 1

GGUF_PACKAGES = ("transformers", "gguf", "safetensors", "torch", "tokenizers")


def convert_gguf(path: Path, tmp: Path, reporter: Reporter) -> dict[str, Any]:
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
        with reporter.progress() as progress:
            task = progress.start("tokenizer (GGUF vocabulary -> tokenizers)", total=4)
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
            progress.advance(task, description="model (dequantize GGUF tensors)")
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, GGUF_DTYPE), trust_remote_code=False)
            progress.advance(task, description="write model.safetensors")
            tensors = _state_dict_to_save(model)
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            progress.advance(task, description="write config and tokenizer")
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


__all__ = ["GGUF_CONVERTER_VERSION", "GGUF_DTYPE", "GGUF_PACKAGES", "convert_gguf", "gguf_float32_bytes"]

"""Hugging Face PEFT LoRA adapters in TensorRT-LLM's format, as NVIDIA's hf_lora_convert.py writes them
(NVIDIA/TensorRT-LLM @05316d3313360012536ace46c781518f5afae75e examples/hf_lora_convert.py):

- adapter_config.json's `r`, `lora_alpha` and `use_rslora` give the scale: alpha/sqrt(r) with rsLoRA, else
  alpha/r (:103-109);
- the keys `...layers.N.(self_attn|mlp).NAME.lora_(A|B).weight` (:47-48) give one row per (layer, module), in the
  order the file holds them: A [rank, in] flattened, then B [out, rank] times the scale flattened (the scale is on
  B), cast to the storage dtype (:122-141); rows are zero-padded to the longest (:144-153);
- `model.lora_weights.npy` [1, rows, max_row] and `model.lora_config.npy` [1, rows, 3] int32 of
  [module_id, layer, rank] (:142-164); module ids and names: pipeline/data/lora_modules.tsv.

Where NVIDIA's script prints and skips what it cannot convert (an unmatched key, a module without both halves),
this refuses the adapter: a skipped module would serve different numbers than the adapter was trained to give.
DoRA and `modules_to_save` (trained embeddings / lm_head, which NVIDIA's engine path does not load per
request) are refused by name.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.core.artifacts import atomic_dir
from pipeline.core.errors import InvalidInputError
from pipeline.reference_runtime.lora import STORAGE_DTYPES, lora_modules

KEY = re.compile(r".*\.layers\.([0-9]+)\.(self_attn|mlp)\.([a-z_]+)\.lora_(A|B)\.weight$")
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# Modules whose input is the hidden state (A's columns) and those whose output is (B's rows): what LoraTarget's
# hidden size checks.
HIDDEN_IN = {"attn_q", "attn_k", "attn_v", "attn_qkv", "mlp_h_to_4h", "mlp_gate"}
HIDDEN_OUT = {"attn_dense", "mlp_4h_to_h"}


@dataclass(frozen=True)
class PeftAdapter:
    path: Path
    rank: int
    alpha: float
    use_rslora: bool
    tensors: dict[str, np.ndarray] = field(repr=False)  # file order, float32

    @property
    def scale(self) -> float:
        return self.alpha / math.sqrt(self.rank) if self.use_rslora else self.alpha / self.rank


@dataclass(frozen=True)
class LoraTarget:
    """What the engine takes: mismatches are InvalidInputError. target_modules: NVIDIA names (None: any)."""

    hidden_size: int
    num_layers: int
    max_rank: int
    target_modules: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TrtllmLora:
    weights: np.ndarray  # [1, rows, max_row], the storage dtype
    config: np.ndarray  # [1, rows, 3] int32: module_id, layer, rank
    rank: int  # the largest
    target_modules: tuple[str, ...]  # NVIDIA names, sorted


def _refuse(path: Path, what: str, hint: str) -> InvalidInputError:
    return InvalidInputError(f"LoRA adapter {path}: {what}", hint=hint)


def load_peft_adapter(path: Path) -> PeftAdapter:
    """Read a PEFT LoRA folder (adapter_config.json + adapter_model.safetensors or .bin)."""
    path = Path(path)
    config_file = path / "adapter_config.json"
    if not config_file.is_file():
        raise _refuse(path, "no adapter_config.json", "Pass the folder PEFT's save_pretrained wrote.")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise _refuse(path, f"adapter_config.json is not JSON ({error})", "Save the adapter again.") from None
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise _refuse(path, f"peft_type {config.get('peft_type')!r} is not LoRA",
                      "Only LoRA adapters (peft_type LORA) have TensorRT-LLM's format.")
    if config.get("use_dora"):
        raise _refuse(path, "it is a DoRA adapter (use_dora: true)",
                      "TensorRT-LLM 1.1's hf_lora_convert.py writes no DoRA magnitudes; train without use_dora.")
    if config.get("modules_to_save"):
        raise _refuse(path, f"it saves whole modules (modules_to_save: {config['modules_to_save']})",
                      "Trained embeddings / lm_head are not served per request; train without modules_to_save.")
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise _refuse(path, f"{key} gives modules their own rank or alpha",
                          "hf_lora_convert.py scales every module by one r and lora_alpha; train with one rank.")
    if str(config.get("bias", "none")) != "none":
        raise _refuse(path, f"it trains biases (bias: {config['bias']!r})", "Train with bias='none'.")
    rank, alpha = config.get("r"), config.get("lora_alpha", config.get("r"))
    if not isinstance(rank, int) or rank <= 0 or not isinstance(alpha, (int, float)):
        raise _refuse(path, f"adapter_config.json has r={rank!r}, lora_alpha={alpha!r}", "r must be a positive integer.")
    weights = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if weights is None:
        raise _refuse(path, f"no {' or '.join(WEIGHT_FILES)}", "Pass the folder PEFT's save_pretrained wrote.")
    return PeftAdapter(path, rank, float(alpha), bool(config.get("use_rslora", False)), _read_tensors(weights))


def _read_tensors(weights: Path) -> dict[str, np.ndarray]:
    import torch

    if weights.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(weights))
    else:
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
    return {key: value.detach().to(torch.float32).numpy() for key, value in state.items()}


def _pairs(adapter: PeftAdapter) -> dict[tuple[int, str], dict[str, np.ndarray]]:
    """(layer, hf module) -> {"A": ..., "B": ...}, in the file's order."""
    known = {m.hf_module: m for m in lora_modules()}
    pairs: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for key, value in adapter.tensors.items():
        match = KEY.match(key)
        if not match or match.group(3) not in known or known[match.group(3)].block != match.group(2):
            raise _refuse(adapter.path, f"tensor {key} is not a LoRA weight TensorRT-LLM maps",
                          f"Target only {', '.join(sorted(known))} (pipeline/data/lora_modules.tsv).")
        pairs.setdefault((int(match.group(1)), match.group(3)), {})[match.group(4)] = value
    for (layer, module), halves in pairs.items():
        if set(halves) != {"A", "B"}:
            raise _refuse(adapter.path, f"layer {layer} {module} has lora_{''.join(halves)} only",
                          "Save the adapter again: every module needs lora_A and lora_B.")
    if not pairs:
        raise _refuse(adapter.path, "it holds no LoRA weights", "Pass the folder PEFT's save_pretrained wrote.")
    return pairs


def _check(adapter: PeftAdapter, layer: int, module: str, shapes: tuple[tuple[int, int], tuple[int, int]],
           expect: LoraTarget | None) -> None:
    (rank, fan_in), (fan_out, rank_b) = shapes
    if rank != rank_b:
        raise _refuse(adapter.path, f"layer {layer} {module}: lora_A has rank {rank}, lora_B {rank_b}",
                      "Save the adapter again.")
    if expect is None:
        return
    if layer >= expect.num_layers:
        raise _refuse(adapter.path, f"it has weights for layer {layer}; the engine has {expect.num_layers} layers",
                      "Use an adapter trained on this base model.")
    hidden = fan_in if module in HIDDEN_IN else fan_out if module in HIDDEN_OUT else expect.hidden_size
    if hidden != expect.hidden_size:
        raise _refuse(adapter.path, f"it was made for hidden size {hidden}; the engine's is {expect.hidden_size}",
                      "Use an adapter trained on this base model.")
    if rank > expect.max_rank:
        raise _refuse(adapter.path, f"its rank {rank} exceeds the engine's max LoRA rank {expect.max_rank}",
                      f"Build with --max-lora-rank {rank} (or more), or use an adapter of rank <= {expect.max_rank}.")
    if expect.target_modules is not None and module not in expect.target_modules:
        raise _refuse(adapter.path, f"it adapts {module}, which the engine was built without LoRA for",
                      f"Build with --lora_target_modules including {module} (built with: "
                      f"{', '.join(expect.target_modules) or 'none'}).")


def to_trtllm_lora(adapter: PeftAdapter, dtype: str, expect: LoraTarget | None = None) -> TrtllmLora:
    """The adapter as TensorRT-LLM's `lora_weights` / `lora_config` tensors, stored in `dtype` (the engine's:
    float32, float16 or bfloat16)."""
    if dtype not in STORAGE_DTYPES:
        raise InvalidInputError(f"LoRA storage dtype {dtype!r} is not one hf_lora_convert.py writes",
                                hint=f"Use one of {', '.join(STORAGE_DTYPES)} (the engine's dtype).")
    names = {m.hf_module: m for m in lora_modules()}
    rows, config = [], []
    pairs = _pairs(adapter)
    for (layer, hf_module), halves in pairs.items():
        module = names[hf_module]
        a, b = halves["A"], halves["B"]
        if a.ndim != 2 or b.ndim != 2:
            raise _refuse(adapter.path, f"layer {layer} {hf_module}: lora weights are not matrices", "Save it again.")
        _check(adapter, layer, module.module, (a.shape, b.shape), expect)
        rows.append(np.concatenate([a.reshape(-1), (b * np.float32(adapter.scale)).reshape(-1)]))
        config.append([module.module_id, layer, a.shape[0]])
    width = max(row.size for row in rows)
    weights = np.zeros((1, len(rows), width), dtype=np.float32)
    for index, row in enumerate(rows):
        weights[0, index, : row.size] = row
    modules = tuple(sorted({names[hf].module for (_, hf) in pairs}))
    return TrtllmLora(_stored(weights, dtype), np.asarray([config], dtype=np.int32), max(c[2] for c in config), modules)


def _stored(weights: np.ndarray, dtype: str) -> np.ndarray:
    if dtype != "bfloat16":
        return weights.astype(STORAGE_DTYPES[dtype])
    import torch  # round to nearest even, as torch's .to(torch.bfloat16) in NVIDIA's script

    bits = torch.from_numpy(weights).to(torch.bfloat16).view(torch.int16).numpy()
    return bits.view(STORAGE_DTYPES["bfloat16"])


def write_trtllm_lora(lora: TrtllmLora, folder: Path) -> Path:
    """model.lora_weights.npy and model.lora_config.npy in `folder` (replaced atomically)."""
    with atomic_dir(Path(folder)) as tmp:
        np.save(tmp / "model.lora_weights.npy", lora.weights, allow_pickle=False)
        np.save(tmp / "model.lora_config.npy", lora.config, allow_pickle=False)
    return Path(folder)

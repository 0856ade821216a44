"""LoRA per request inside transformers' continuous batching: several adapters in one packed step.

The batching manager packs every request of a step into one sequence ([1, tokens, hidden]); the step's requests
are `batch_processor.inputs_and_outputs.requests_in_batch`, in the order of the forward's `cu_seq_lens_q`
bounds (transformers 5.24 continuous_batching/input_outputs.py prepare_batch_tensors). A pre-hook on the model
turns them into (first token, end token, adapter) segments through the request's sampler slot (the engine
binds a slot to the adapter its request uses); a hook on each adapted linear layer then adds
x[segment] @ A^T @ B^T (the scale is folded into B, as in TensorRT-LLM's format) to that segment's output only.
Requests without an adapter, and steps without any, run the base model unchanged (the hooks return at once).

The settings are the tensorrt_llm model's NVIDIA parameters: lora_cache_host_memory_bytes (the host cache,
default 1 GiB as PeftCacheConfig's) and lora_prefetch_dir (adapters loaded at start). The engine's dtype, max
rank and LoRA modules come from its config.json (pretrained_config.dtype; build_config.lora_config's
max_lora_rank and lora_target_modules as trtllm-build records them, when present: otherwise rank 64 and every
module of the table).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pipeline.reference_runtime.internals import require
from pipeline.reference_runtime.lora import (DEFAULT_MAX_RANK, STORAGE_DTYPES, Adapter, LoraCache, LoraLayout,
                                             LoraRequest, lora_modules, read_prefetch_dir)

LOG = logging.getLogger("pipeline.reference_runtime")
DEFAULT_HOST_CACHE_BYTES = 1 << 30
_LINEAR = re.compile(r"(?:.*\.)?layers\.(\d+)\.(self_attn|mlp)\.(\w+)$")


@dataclass(frozen=True)
class LoraSettings:
    host_cache_bytes: int = DEFAULT_HOST_CACHE_BYTES
    prefetch_dir: Path | None = None
    dtype: str = "float32"  # the engine's (the dtype lora_weights must have)
    max_rank: int = DEFAULT_MAX_RANK
    target_modules: tuple[str, ...] = ()  # NVIDIA names; empty: every module of the table

    @classmethod
    def from_engine(cls, parameters: Mapping[str, object], engine_config: Mapping[str, Any]) -> "LoraSettings":
        from pipeline.reference_runtime.settings import SettingsError, _number, _value

        size = _number(parameters, "lora_cache_host_memory_bytes", int, DEFAULT_HOST_CACHE_BYTES)
        if size < 1:
            raise SettingsError(f"lora_cache_host_memory_bytes must be at least 1, got {size}.")
        prefetch = _value(parameters, "lora_prefetch_dir")
        dtype = str((engine_config.get("pretrained_config") or {}).get("dtype") or "float32")
        if dtype not in STORAGE_DTYPES:
            raise SettingsError(f"the engine's dtype {dtype!r} has no LoRA storage type ({', '.join(STORAGE_DTYPES)})")
        lora = (engine_config.get("build_config") or {}).get("lora_config") or {}
        return cls(size, Path(prefetch) if prefetch else None, dtype,
                   int(lora.get("max_lora_rank") or DEFAULT_MAX_RANK), tuple(lora.get("lora_target_modules") or ()))


class LoraRuntime:
    """The engine's LoRA: its cache, the slot -> adapter bindings, and the hooks that apply them."""

    def __init__(self, model, manager, settings: LoraSettings) -> None:
        self._manager = manager
        self._linears = _adapted_linears(model, settings.target_modules)
        shapes = {key: (linear.in_features, linear.out_features) for key, linear in self._linears.items()}
        layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        self.layout = LoraLayout(settings.dtype, layers, settings.max_rank, shapes,
                                 frozenset(module for (_, module) in shapes))
        self.cache = LoraCache(settings.host_cache_bytes, self.layout)
        self._slots: dict[int, Adapter] = {}
        self._segments: list[tuple[int, int, Adapter]] = []
        self._hooked = False
        self._hook_lock = threading.Lock()
        self._model = model
        if settings.prefetch_dir is not None:
            for adapter in read_prefetch_dir(settings.prefetch_dir, self.layout):
                self.cache.put(adapter)
            LOG.info("LoRA: prefetched task(s) %s from %s", self.cache.task_ids() or "none", settings.prefetch_dir)

    # -- per request ---------------------------------------------------------------------------------
    def resolve(self, request: LoraRequest | None) -> Adapter | None:
        """The request's adapter, held until unbind (RequestError with NVIDIA's message when refused)."""
        adapter = self.cache.acquire(request)
        if adapter is not None:
            self._install()
        return adapter

    def bind(self, slot: int, adapter: Adapter | None) -> None:
        if adapter is not None:
            self._slots[slot] = adapter

    def unbind(self, slot: int) -> None:
        self.cache.release(self._slots.pop(slot, None))

    # -- hooks -------------------------------------------------------------------------------------
    def _install(self) -> None:
        with self._hook_lock:
            if self._hooked:
                return
            self._model.register_forward_pre_hook(self._before_step, with_kwargs=True)
            for key, linear in self._linears.items():
                linear.register_forward_hook(self._hook_for(key))
            self._hooked = True

    def _before_step(self, _model, args, kwargs):
        slots = dict(self._slots)
        cu = kwargs.get("cu_seq_lens_q")
        processor = getattr(self._manager, "batch_processor", None)
        if not slots or cu is None or processor is None:
            self._segments = []
            return None
        requests = require(processor.inputs_and_outputs, "requests_in_batch", "ContinuousBatchingIOs")
        bounds = cu.tolist()
        if len(bounds) != len(requests) + 1:
            raise RuntimeError(f"LoRA: {len(requests)} requests in the step but {len(bounds) - 1} query segments")
        segments = []
        for index, future in enumerate(requests):
            adapter = slots.get(int(future.state.logit_processor_kwargs.get("slot", -1)))
            if adapter is not None and bounds[index + 1] > bounds[index]:
                segments.append((bounds[index], bounds[index + 1], adapter))
        self._segments = segments
        return None

    def _hook_for(self, key: tuple[int, int]):
        def hook(_module, inputs, output):
            segments = self._segments
            if not segments:
                return None
            import torch

            x = inputs[0]
            for start, end, adapter in segments:
                pair = adapter.pairs.get(key)
                if pair is None:
                    continue
                a, b = (torch.from_numpy(m).to(x.dtype) for m in pair)
                output[:, start:end] += (x[:, start:end] @ a.T) @ b.T
            return output
        return hook


def _adapted_linears(model, target_modules: tuple[str, ...]) -> dict[tuple[int, int], Any]:
    """(layer, module_id) -> the model's linear layer, for the table's modules (only `target_modules` if given)."""
    table = {(m.block, m.hf_module): m for m in lora_modules()}
    found = {}
    for name, module in model.named_modules():
        match = _LINEAR.match(name)
        entry = table.get((match.group(2), match.group(3))) if match else None
        if entry is None or not hasattr(module, "in_features"):
            continue
        if target_modules and entry.module not in target_modules:
            continue
        found[(int(match.group(1)), entry.module_id)] = module
    return found

"""`pipeline build --lora [NAME=]PATH ... [--max-lora-rank R] [--lora-target-modules M ...]`: the adapters an
engine is built for, the trtllm-build flags they add, the memory their cache takes, and what the engine
folder records (manifest "lora"; the converted adapters in <engine>/lora/<task_id>/, which render ships
as the tensorrt_llm model's lora_prefetch_dir).

trtllm-build's LoRA flags, as NVIDIA/TensorRT-LLM tensorrt_llm/commands/build.py has them (the stored copy
@008b2b8d23af: the "LoRA arguments" group at lines 259-286, the plugin flags from add_plugin_argument at 327-328;
the same options, with the same defaults and choices, are rows of shared/reference/trtllm_build_flags.tsv, read
@65f1d1536e18; neither the v1.1.0 tag nor release/1.1 of build.py is among the stored sources):
- `--lora_plugin <dtype>` (a PluginConfig flag, plugin.py): turns LoRA on; the dtype is the engine's;
- `--lora_dir DIR ...` (nargs +): the PEFT folders; the first is read for the configuration;
- `--lora_target_modules M ...` (nargs +, choices LoraManager.LORA_MODULE_IDS): wins over lora_dir's modules;
- `--max_lora_rank R` (default 64): sizes the LoRA plugin's workspace.
build.py's build_model (same copy, lines 378-385) builds the engine's LoraConfig from exactly these, and only when
lora_plugin is set; the CLI's target modules win over those read from lora_dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.build.checkpoint import CheckpointInfo
from pipeline.build.flags import Flag
from pipeline.build.memory import MemoryEstimate
from pipeline.convert.lora_set import (LORA_SUBDIR, AdapterRef, ConvertedAdapter, LoraShape, adapter_ranks_and_modules,
                                       adapters_identity, convert_adapters, lora_record, parse_adapters)
from pipeline.core.errors import InvalidInputError
from pipeline.planner import ModelSpec
from pipeline.reference_runtime.lora import lora_modules

DEFAULT_MAX_LORA_RANK = 64  # trtllm-build's own default
LORA_PLUGIN_DTYPES = ("float16", "bfloat16", "float32")
HOST_CACHE_DEFAULT_BYTES = 1 << 30  # lora_cache_host_memory_bytes' default, 1G (tensorrtllm_backend@b9cc2248 docs/model_config.md:145-153)


class LoraPlan(BaseModel):
    """The adapters of one build, checked: their refs, what each converts to, and the engine's LoRA shape."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    refs: list[AdapterRef]
    adapters: list[ConvertedAdapter]
    shape: LoraShape

    @property
    def cache_bytes(self) -> int:
        """Every adapter resident at once, at its own rank: the device (and host) cache it asks for."""
        return sum(a.bytes for a in self.adapters)

    def identity(self) -> dict[str, Any]:
        return {"adapters": adapters_identity(self.refs), "shape": self.shape.model_dump()}

    def record(self) -> dict[str, Any]:
        return lora_record(self.adapters, self.shape)


def engine_shape(ckpt: CheckpointInfo, is_cpu: bool) -> ModelSpec:
    """The model shape with the engine's dtype: a TensorRT-LLM checkpoint's own, the HF folder's for the reference
    runtime (it serves those weights), and for a GPU plan from an HF folder the dtype `pipeline convert` will write
    (bfloat16 for --quant bf16, else its default float16)."""
    if is_cpu or ckpt.kind == "trtllm":
        return ckpt.shape
    return ckpt.shape.model_copy(update={"dtype": "bfloat16" if ckpt.quant == "bf16" else "float16"})


def plan_lora(specs: list[str], model: ModelSpec, max_lora_rank: int | None = None,
              target_modules: list[str] | None = None) -> LoraPlan | None:
    """The checked adapters (None without --lora). Bad input is InvalidInputError before any work: a rank
    above --max-lora-rank, another hidden size or layer count, a module the engine is not built with,
    DoRA / modules_to_save (refused by pipeline/convert/lora.py), task id 0, a dtype LoRA cannot use."""
    if not specs:
        if max_lora_rank is not None or target_modules:
            raise InvalidInputError("--max-lora-rank and --lora-target-modules need adapters.",
                                    hint="Add --lora [NAME=]PATH (a PEFT adapter folder) for each adapter.")
        return None
    dtype = str(model.dtype or "float16")
    if dtype not in LORA_PLUGIN_DTYPES:
        raise InvalidInputError(f"The checkpoint's dtype {dtype!r} has no LoRA plugin type.",
                                hint=f"LoRA engines are {', '.join(LORA_PLUGIN_DTYPES)}; convert with --dtype float16.")
    refs = parse_adapters(specs)
    ranks, modules = adapter_ranks_and_modules(refs)
    worst, rank = max(ranks.items(), key=lambda item: item[1])
    if max_lora_rank is not None and rank > max_lora_rank:
        raise InvalidInputError(f"--lora {worst}: rank {rank} exceeds --max-lora-rank {max_lora_rank}.",
                                hint=f"Use --max-lora-rank {rank} or more (or leave it out: the largest adapter rank).")
    known = [m.module for m in lora_modules()]  # pipeline/data/lora_modules.tsv: what an adapter can target here
    unknown = sorted(set(target_modules or ()) - set(known))
    if unknown:
        raise InvalidInputError(f"--lora-target-modules {' '.join(unknown)}: not a module an adapter converts to.",
                                hint=f"Use NVIDIA's names: {', '.join(dict.fromkeys(known))}.")
    engine_modules = tuple(target_modules) if target_modules else tuple(modules)
    shape = LoraShape(hidden_size=model.hidden_size, num_layers=model.num_layers,
                      max_rank=max_lora_rank or rank, target_modules=engine_modules, dtype=dtype)
    return LoraPlan(refs=refs, adapters=convert_adapters(refs, shape), shape=shape)


def lora_flags(lora: LoraPlan) -> list[Flag]:
    """The trtllm-build flags of the module docstring, each with its reason."""
    dirs = [a.source for a in lora.adapters]
    modules = list(lora.shape.target_modules or ())
    return [
        Flag(name="--lora_plugin", value=lora.shape.dtype, why="LoRA on, in the engine's dtype (the adapters' storage dtype)"),
        Flag(name="--lora_dir", value=dirs[0], extra=tuple(dirs[1:]),
             why=f"{len(dirs)} PEFT adapter(s); trtllm-build reads the first for the configuration"),
        Flag(name="--lora_target_modules", value=modules[0], extra=tuple(modules[1:]),
             why="every module an adapter targets (NVIDIA names)"),
        Flag(name="--max_lora_rank", value=str(lora.shape.max_rank),
             why="the largest adapter rank the engine serves (sizes the LoRA plugin workspace)"),
    ]


def reference_lora_config(lora: LoraPlan) -> dict[str, Any]:
    """What a reference engine folder's config.json build_config records, in trtllm-build's own keys
    (build_config.lora_config and plugin_config.lora_plugin of an engine's config.json)."""
    return {"lora_config": {"lora_dir": [], "lora_ckpt_source": "hf", "max_lora_rank": lora.shape.max_rank,
                            "lora_target_modules": list(lora.shape.target_modules or ())},
            "lora_plugin": lora.shape.dtype}


def write_lora_dir(lora: LoraPlan | None, engine_dir: Path) -> None:
    """<engine>/lora/<task_id>/: every adapter in NVIDIA's format, for render's lora_prefetch_dir (no-op without)."""
    if lora is not None:
        convert_adapters(lora.refs, lora.shape, Path(engine_dir) / LORA_SUBDIR)


def lora_manifest(lora: LoraPlan, memory: MemoryEstimate) -> dict[str, Any]:
    """The engine manifest's "lora": the adapters (name -> task id), the engine's rank, modules and dtype, and the
    cache sizes render gives the tensorrt_llm model (the device cache as a fraction of the memory left after the
    KV cache, from the memory estimate; a host cache that holds every adapter, at least the backend's 1 GiB)."""
    ranks = [a.rank for a in lora.adapters]
    return {
        **lora.record(),
        "cache": {
            "optimal_adapter_size": max(set(ranks), key=ranks.count),
            "max_adapter_size": lora.shape.max_rank,
            "gpu_memory_fraction": memory.lora_cache_fraction,
            "host_memory_bytes": max(HOST_CACHE_DEFAULT_BYTES, 2 * lora.cache_bytes),
            "device_bytes": lora.cache_bytes,
        },
    }

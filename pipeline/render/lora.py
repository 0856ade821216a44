"""The tensorrt_llm model's LoRA parameters, for an engine built with adapters (`pipeline build --lora`).

The parameter names and defaults are NVIDIA's config.pbtxt (tensorrtllm_backend@c2e65b88 all_models/
inflight_batcher_llm/tensorrt_llm/config.pbtxt:739-763, read by model_instance_state.cc:287-352 into the
executor's PeftCacheConfig; tensorrtllm_backend@b9cc2248 docs/model_config.md:145-153):
lora_cache_optimal_adapter_size (8), lora_cache_max_adapter_size (64), lora_cache_gpu_memory_fraction (0.05
of the memory left after the engine and the KV cache), lora_cache_host_memory_bytes (1G) and
lora_prefetch_dir, a folder of numeric task-id folders each holding model.lora_weights.npy and
model.lora_config.npy, loaded when the instance starts (docs/lora.md:134-157), so that no client has to
send weights.

The engine folder carries its adapters in <engine>/lora/<task_id>/ and the sizes build chose in its
manifest's "lora"; the bundle links the folder into ROOT/tensorrt_llm/1/lora/, which is the prefetch dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.artifacts import read_manifest
from pipeline.core.errors import InvalidInputError

LORA_SUBDIR = "lora"
LORA_FILES = ("model.lora_weights.npy", "model.lora_config.npy")


def engine_lora(engine: Path, config: dict) -> dict[str, Any] | None:
    """What the engine says about LoRA: its manifest's "lora" (a `pipeline build --lora` engine), else the
    plugin and rank trtllm-build wrote into config.json; None for an engine without LoRA."""
    recorded = (read_manifest(Path(engine)) or {}).get("lora")
    if recorded:
        return dict(recorded)
    build_config = config.get("build_config") or {}
    plugin = (build_config.get("plugin_config") or {}).get("lora_plugin")
    if not plugin or plugin == "disable":
        return None
    lora_config = build_config.get("lora_config") or {}
    return {"dtype": plugin, "max_lora_rank": lora_config.get("max_lora_rank"), "task_ids": {},
            "target_modules": lora_config.get("lora_target_modules") or [], "cache": {}}


def prefetch_task_ids(engine: Path) -> list[int]:
    """The task-id folders of <engine>/lora/, checked as the backend reads them (digits, not 0, both files)."""
    folder = Path(engine) / LORA_SUBDIR
    if not folder.is_dir():
        return []
    ids = []
    for child in sorted(folder.iterdir()):
        if not child.is_dir():
            continue
        if not child.name.isdigit() or int(child.name) == 0:
            raise InvalidInputError(f"{child} is not a task-id folder: the backend names prefetched adapters by their "
                                    "task id, digits and not 0 (0 is 'no LoRA').",
                                    hint="Rebuild with `pipeline build --lora NAME=PATH` (ids from 1), or rename the folder.")
        missing = [name for name in LORA_FILES if not (child / name).is_file()]
        if missing:
            raise InvalidInputError(f"{child} lacks {', '.join(missing)}.", hint="Rebuild the engine with --lora.")
        ids.append(int(child.name))
    return sorted(ids)


def lora_parameters(engine: Path, config: dict, engine_root: Path) -> dict[str, str]:
    """The lora_* parameters for the tensorrt_llm model ({} without LoRA); engine_root is where the engine
    folder lies in the bundle (ROOT/tensorrt_llm/1)."""
    lora = engine_lora(engine, config)
    if lora is None:
        if prefetch_task_ids(engine):
            raise InvalidInputError(f"{engine}/lora/ holds adapters, but the engine was built without LoRA.",
                                    hint="Rebuild with `pipeline build --lora ...`.")
        return {}
    cache = lora.get("cache") or {}
    parameters = {
        "lora_cache_optimal_adapter_size": str(cache.get("optimal_adapter_size") or 8),
        "lora_cache_max_adapter_size": str(cache.get("max_adapter_size") or lora.get("max_lora_rank") or 64),
        "lora_cache_gpu_memory_fraction": f"{cache.get('gpu_memory_fraction') or 0.05:g}",
        "lora_cache_host_memory_bytes": str(cache.get("host_memory_bytes") or 1 << 30),
    }
    if prefetch_task_ids(engine):
        parameters["lora_prefetch_dir"] = str(Path(engine_root) / LORA_SUBDIR)
    return parameters


def relocate_lora_dirs(options: dict[str, Any], deployable: Path, engine_root: Path) -> dict[str, Any]:
    """A PyTorch deployable's options with lora_config.lora_dir moved from where `pipeline build` wrote the
    adapters (<deployable>/lora/<name>) to where the bundle holds them (ROOT/tensorrt_llm/1/lora/<name>)."""
    lora = options.get("lora_config")
    if not isinstance(lora, dict) or not lora.get("lora_dir"):
        return options
    moved = []
    for text in lora["lora_dir"]:
        path = Path(text)
        try:
            moved.append(str(Path(engine_root) / path.resolve().relative_to(Path(deployable).resolve())))
        except ValueError:
            raise InvalidInputError(f"lora_config.lora_dir {text} is outside the deployable {deployable}: the bundle "
                                    "could not carry it.", hint="Rebuild with `pipeline build --backend pytorch --lora ...`.") from None
    return {**options, "lora_config": {**lora, "lora_dir": moved}}

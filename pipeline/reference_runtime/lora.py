"""LoRA adapters in TensorRT-LLM's request format, as the reference runtime holds them: the module table, the
storage dtypes, the checks NVIDIA's runtime makes on `lora_weights` / `lora_config`, and the host cache with
NVIDIA's semantics. Applying them to the model is lora_apply.py; making them from PEFT folders is
pipeline/convert/lora.py.

The format (hf_lora_convert.py, TensorRT-LLM @05316d33 examples/hf_lora_convert.py:122-143; the tensorrt_llm
config.pbtxt comments, tensorrtllm_backend @c2e65b88 all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt:
363-389): `lora_weights` [1, rows, max_row] in the engine's dtype, each row one (layer, module) adapter: A
[rank, in] flattened, then B [out, rank] times the scale flattened, zero-padded; `lora_config` [1, rows, 3] int32
rows of [module_id, layer, rank].

Cache semantics (the same config.pbtxt:348-351 and NVIDIA/TensorRT-LLM @9df6d722
cpp/tensorrt_llm/batch_manager/peftCacheManager.cpp PeftCacheManager::addRequestPeft): a task's first request
carries its weights, later ones only `lora_task_id`; an id that is not cached, sent without weights, is refused
with NVIDIA's message; the cache evicts the least recently used adapter no running request holds, and refuses
to store one when every adapter it holds is in use ("PEFT Cache is full. Could not store taskId=N").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from pipeline.data import packaged_fact_rows
from pipeline.reference_runtime.requests import RequestError

# The storage dtypes hf_lora_convert.py writes (--storage-type float32 | float16 | bfloat16). numpy has no bfloat16:
# TensorRT-LLM's torch_to_numpy views its bits as a 2-byte void type, which np.save writes as '|V2'; so do we.
BF16 = np.dtype("V2")
STORAGE_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}
# The Triton type of `lora_weights` for each engine dtype (render declares it; the C++ runtime refuses any other:
# "Expected lora weights to be the same data type as base model", loraUtils.cpp loraValidateRequestTensors).
TRITON_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}
# NVIDIA's messages (TensorRT-LLM @77d24b5f cpp/tensorrt_llm/runtime/loraUtils.cpp; peftCacheManager.cpp above)
NOT_CACHED = "LoRA task {task} not found in cache. Please send LoRA weights with request"
CACHE_FULL = "PEFT Cache is full. Could not store taskId={task}"
WRONG_DTYPE = "Expected lora weights to be the same data type as base model"
TASK_ID_REQUIRED = "lora_task_id must be set for LoRA inference"
DEFAULT_MAX_RANK = 64  # trtllm-build --max_lora_rank's default


@dataclass(frozen=True)
class LoraModule:
    hf_module: str  # the PEFT module name (q_proj, gate_proj, ...)
    block: str  # self_attn | mlp
    module: str  # NVIDIA's name (attn_q, mlp_h_to_4h, ...)
    module_id: int


@lru_cache(maxsize=1)
def lora_modules() -> tuple[LoraModule, ...]:
    """pipeline/data/lora_modules.tsv: NVIDIA's module ids and the HF names mapped onto them."""
    return tuple(LoraModule(r["hf_module"], r["block"], r["module"], int(r["module_id"]))
                 for r in packaged_fact_rows("lora_modules.tsv"))


def to_float32(array: np.ndarray) -> np.ndarray:
    """Stored LoRA weights as float32 (bfloat16 bits, '|V2' or uint16, widened exactly)."""
    if array.dtype == BF16 or array.dtype == np.uint16:
        return (np.ascontiguousarray(array).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(array, dtype=np.float32)


@dataclass(frozen=True)
class LoraLayout:
    """What an engine accepts: its dtype, layers, max rank, and (layer, module_id) -> (in, out) features."""

    dtype: str
    num_layers: int
    max_rank: int
    shapes: dict[tuple[int, int], tuple[int, int]]
    modules: frozenset[int]  # module ids the engine has LoRA for


@dataclass(frozen=True)
class Adapter:
    """One task's weights, float32: (layer, module_id) -> (A [rank, in], B [out, rank], scale folded into B)."""

    task_id: int
    pairs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]
    nbytes: int  # as stored in the engine's dtype (what the host cache counts)


def _module_name(module_id: int) -> str:
    return next((m.module for m in lora_modules() if m.module_id == module_id), str(module_id))


def parse_adapter(task_id: int, weights: np.ndarray, config: np.ndarray, layout: LoraLayout) -> Adapter:
    """Check request tensors as TensorRT-LLM's loraValidateRequestTensors does, then split them into A/B pairs.
    Raises RequestError with NVIDIA's message where it has one."""
    if weights.dtype != STORAGE_DTYPES[layout.dtype]:
        raise RequestError(f"{WRONG_DTYPE} (lora_weights is {weights.dtype}, this engine is {layout.dtype}); convert "
                           f"the adapter with --storage-type {layout.dtype}.")
    if config.dtype != np.int32:
        raise RequestError(f"Expected  lora keys to have TYPE_INT32 but was {config.dtype}")
    weights = weights.reshape(weights.shape[-2:]) if weights.ndim == 3 and weights.shape[0] == 1 else weights
    config = config.reshape(config.shape[-2:]) if config.ndim == 3 and config.shape[0] == 1 else config
    if weights.ndim != 2 or config.ndim != 2:
        raise RequestError("Expected batch dimension to be 1 for each lora request")
    if config.shape[0] != weights.shape[0]:
        raise RequestError("Expected dim1 lora_weights and lora_keys to have the same size")
    if config.shape[1] == 4:
        raise RequestError("lora_config has DoRA rows (4 values): the reference runtime does not apply DoRA.")
    if config.shape[1] != 3:
        raise RequestError("Expected dim2 of lora_keys to have a size in [3, 4]")
    pairs = {}
    for row, (module_id, layer, rank) in enumerate(config.tolist()):
        name = _module_name(module_id)
        if not 0 <= layer < layout.num_layers:
            raise RequestError("Expected layerId to be in the range [0, numModelLayers)")
        if rank <= 0:
            raise RequestError("Expected adapterSize to be > 0")
        if module_id not in layout.modules or (layer, module_id) not in layout.shapes:
            raise RequestError(f"lora module {name} not enabled for this model")
        fan_in, fan_out = layout.shapes[(layer, module_id)]
        if rank * (fan_in + fan_out) > weights.shape[1]:
            raise RequestError(f"lora_weights has to few values for {name}")
        if rank > layout.max_rank:
            raise RequestError(f"Invalid low_rank ({rank}). low_rank must be smaller than mMaxLowRank ({layout.max_rank})")
        values = to_float32(weights[row, : rank * (fan_in + fan_out)])
        pairs[(layer, module_id)] = (values[: rank * fan_in].reshape(rank, fan_in).copy(),
                                     values[rank * fan_in:].reshape(fan_out, rank).copy())
    return Adapter(task_id, pairs, int(weights.nbytes))


@dataclass(frozen=True)
class LoraRequest:
    """A request's LoRA inputs: the task id, and on its first request the weights and config."""

    task_id: int | None
    weights: np.ndarray | None = None
    config: np.ndarray | None = None


class LoraCache:
    """The host cache of adapters by task id (see the module docstring for the semantics)."""

    def __init__(self, capacity_bytes: int, layout: LoraLayout) -> None:
        self.capacity, self.layout = capacity_bytes, layout
        self._adapters: OrderedDict[int, Adapter] = OrderedDict()  # least recently used first
        self._in_use: dict[int, int] = {}
        self._lock = threading.Lock()

    def task_ids(self) -> list[int]:
        with self._lock:
            return list(self._adapters)

    def acquire(self, request: LoraRequest | None) -> Adapter | None:
        """The adapter for a request (None: no LoRA), held until release(); stores weights a request carries."""
        if request is None or (request.task_id is None and request.weights is None and request.config is None):
            return None
        if request.task_id is None:
            raise RequestError(TASK_ID_REQUIRED)
        task = int(request.task_id)
        if task == 0:
            raise RequestError("lora_task_id 0 is not a LoRA task: NVIDIA's clients send no lora_task_id for 0 ('no "
                               "LoRA'). Leave lora_task_id unset for the base model, or number adapters from 1.")
        if (request.weights is None) != (request.config is None):
            raise RequestError("lora_weights and lora_config go together: send both (the first request of a task) "
                               "or neither (a cached task).")
        adapter = None if request.weights is None else parse_adapter(task, request.weights, request.config,
                                                                     self.layout)
        with self._lock:
            if adapter is not None:
                self._store(adapter)
            elif task not in self._adapters:
                raise RequestError(NOT_CACHED.format(task=task))
            self._adapters.move_to_end(task)
            self._in_use[task] = self._in_use.get(task, 0) + 1
            return self._adapters[task]

    def put(self, adapter: Adapter) -> None:
        """Store an adapter (a prefetched one) without holding it."""
        with self._lock:
            self._store(adapter)

    def release(self, adapter: Adapter | None) -> None:
        if adapter is None:
            return
        with self._lock:
            left = self._in_use.get(adapter.task_id, 0) - 1
            if left > 0:
                self._in_use[adapter.task_id] = left
            else:
                self._in_use.pop(adapter.task_id, None)

    def _store(self, adapter: Adapter) -> None:
        old = self._adapters.pop(adapter.task_id, None)
        used = sum(a.nbytes for a in self._adapters.values())
        for task in list(self._adapters):
            if used + adapter.nbytes <= self.capacity:
                break
            if not self._in_use.get(task):
                used -= self._adapters.pop(task).nbytes
        if used + adapter.nbytes > self.capacity:
            if old is not None:
                self._adapters[adapter.task_id] = old
            raise RequestError(f"{CACHE_FULL.format(task=adapter.task_id)} ({adapter.nbytes} bytes; the host cache "
                               f"holds {used} of {self.capacity} in adapters running requests use). Raise "
                               "lora_cache_host_memory_bytes, or retry once those requests end.")
        self._adapters[adapter.task_id] = adapter


def read_prefetch_dir(folder: Path, layout: LoraLayout) -> list[Adapter]:
    """The adapters of a lora_prefetch_dir: one folder per task, named by its id (digits), holding NVIDIA's
    model.lora_weights.npy and model.lora_config.npy (tensorrtllm_backend v1.1.0 docs/lora.md:134-157)."""
    if not folder.is_dir():
        raise ValueError(f"lora_prefetch_dir {folder} is not a folder")
    adapters = []
    for task_dir in sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.name):
        if not task_dir.name.isdigit():
            raise ValueError(f"lora_prefetch_dir {folder}: {task_dir.name!r} is not a task id (folder names are digits)")
        files = [task_dir / "model.lora_weights.npy", task_dir / "model.lora_config.npy"]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"lora_prefetch_dir {task_dir} lacks {', '.join(missing)}")
        weights, config = (np.load(f, allow_pickle=False) for f in files)
        try:
            adapters.append(parse_adapter(int(task_dir.name), weights, config, layout))
        except RequestError as error:
            raise ValueError(f"lora_prefetch_dir {task_dir}: {error}") from None
    return adapters

"""The adapters of one deployment: `--lora [NAME=]PATH ...` parsed into named, numbered PEFT adapters,
checked against the base model, and written in NVIDIA's format as one task-id folder each.

`convert --lora`, `build --lora` and render share this. The format itself (reading a PEFT folder,
NVIDIA's rows and module ids, refusing DoRA and modules_to_save) is pipeline/convert/lora.py.

Task ids: NVIDIA's sample clients send `lora_task_id` only when it is not 0 (0 means "no LoRA";
tensorrtllm_backend@c2e65b88 inflight_batcher_llm/client/inflight_batcher_llm_client.py:675-688,
end_to_end_grpc_client.py:634-642), and the backend's prefetch folder names each adapter by a numeric
folder (tensorrtllm_backend@b9cc2248 docs/lora.md:134-157). So an adapter named by digits keeps that
id, the others get the smallest free ids from 1, and 0 is refused.

    <folder>/<task_id>/model.lora_weights.npy   [1, rows, max_row], the engine's dtype
    <folder>/<task_id>/model.lora_config.npy    [1, rows, 3] int32 rows of [module_id, layer, rank]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict

from pipeline.core.artifacts import source_revision
from pipeline.core.errors import InvalidInputError

LORA_SUBDIR = "lora"  # <checkpoint>/lora/, <engine>/lora/: one task-id folder per adapter
BASE_NAME = "base"  # what bench --lora-mix and smoke call requests without an adapter
STORAGE_DTYPES = ("float16", "bfloat16", "float32")
ANY_RANK = 1 << 30  # LoraTarget.max_rank when nothing caps it (convert --lora: the build decides)


@dataclass(frozen=True)
class AdapterRef:
    """One `--lora` argument: the adapter's name, its task id and its PEFT folder."""

    name: str
    task_id: int
    path: Path


class LoraShape(BaseModel):
    """What the adapters must fit: the base model's hidden size and layer count, the engine's largest rank,
    the target modules it was built with (NVIDIA names; None: any), and the storage dtype."""

    model_config = ConfigDict(frozen=True)

    hidden_size: int
    num_layers: int
    max_rank: int | None = None
    target_modules: tuple[str, ...] | None = None
    dtype: str = "float16"


class ConvertedAdapter(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    task_id: int
    source: str
    rank: int
    target_modules: list[str]
    bytes: int


def parse_adapters(specs: Iterable[str]) -> list[AdapterRef]:
    """`[NAME=]PATH` arguments -> named adapters with task ids (see the module docstring)."""
    named: list[tuple[str, Path, int | None]] = []
    for spec in specs:
        name, sep, path_text = str(spec).partition("=")
        if not sep:
            name, path_text = Path(spec).name, spec
        name = name.strip()
        if not name or not path_text:
            raise InvalidInputError(f"--lora {spec!r}: expected PATH or NAME=PATH.", hint="e.g. --lora sql=adapters/sql.")
        if name == BASE_NAME:
            raise InvalidInputError(f"--lora {spec!r}: {BASE_NAME!r} names the requests without an adapter.",
                                    hint="Give the adapter another name (NAME=PATH).")
        task_id = int(name) if name.isdigit() else None
        if task_id == 0:
            raise InvalidInputError(
                f"--lora {spec!r}: task id 0 means 'no LoRA' to NVIDIA's clients (they never send it).",
                hint="Number adapters from 1, or name them (NAME=PATH) and let the ids be chosen.")
        named.append((name, Path(path_text), task_id))
    names = [name for name, _, _ in named]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise InvalidInputError(f"--lora names {', '.join(duplicates)} more than once.", hint="Give each adapter its own NAME=PATH.")
    taken = {task_id for _, _, task_id in named if task_id is not None}
    refs, next_id = [], 1
    for name, path, task_id in named:
        if task_id is None:
            while next_id in taken:
                next_id += 1
            task_id = next_id
            taken.add(task_id)
        refs.append(AdapterRef(name=name, task_id=task_id, path=path))
    return refs


def convert_adapters(refs: list[AdapterRef], shape: LoraShape, folder: Path | None = None, *,
                     check: bool = True) -> list[ConvertedAdapter]:
    """Every adapter read, checked against `shape` (InvalidInputError on the first mismatch; check=False: read only)
    and converted; written to folder/<task_id>/ when a folder is given (None: check only)."""
    from pipeline.convert import lora as fmt

    if shape.dtype not in STORAGE_DTYPES:
        raise InvalidInputError(f"LoRA weights cannot be stored as {shape.dtype!r}.",
                                hint=f"The engine's dtype must be one of {', '.join(STORAGE_DTYPES)}.")
    converted = []
    for ref in refs:
        if not Path(ref.path).is_dir():
            raise InvalidInputError(f"--lora {ref.name}={ref.path}: no such folder.",
                                    hint="Point at a PEFT adapter folder (adapter_config.json + adapter_model.safetensors).")
        adapter = fmt.load_peft_adapter(Path(ref.path))
        expect = fmt.LoraTarget(hidden_size=shape.hidden_size, num_layers=shape.num_layers,
                                max_rank=shape.max_rank or ANY_RANK, target_modules=shape.target_modules)
        try:
            lora = fmt.to_trtllm_lora(adapter, shape.dtype, expect if check else None)
        except InvalidInputError as error:
            raise InvalidInputError(f"--lora {ref.name}={ref.path}: {error.message}", hint=error.hint) from error
        if folder is not None:
            fmt.write_trtllm_lora(lora, Path(folder) / str(ref.task_id))
        converted.append(ConvertedAdapter(name=ref.name, task_id=ref.task_id, source=str(Path(ref.path).resolve()),
                                          rank=int(lora.rank), target_modules=list(lora.target_modules),
                                          bytes=int(lora.weights.nbytes)))
    return converted


def adapter_ranks_and_modules(refs: list[AdapterRef]) -> tuple[dict[str, int], list[str]]:
    """(rank of each adapter by name, NVIDIA target modules of them all in NVIDIA's id order), unchecked."""
    from pipeline.reference_runtime.lora import lora_modules

    converted = convert_adapters(refs, LoraShape(hidden_size=0, num_layers=0, dtype="float32"), check=False)
    modules = {module for adapter in converted for module in adapter.target_modules}
    order = {m.module: m.module_id for m in lora_modules()}
    return {a.name: a.rank for a in converted}, sorted(modules, key=lambda name: (order.get(name, 1 << 20), name))


def adapters_identity(refs: list[AdapterRef]) -> list[dict[str, Any]]:
    """What the adapters contribute to an inputs hash: names, ids and the content of each folder."""
    return [{"name": ref.name, "task_id": ref.task_id, "revision": source_revision(Path(ref.path))} for ref in refs]


def lora_record(adapters: list[ConvertedAdapter], shape: LoraShape) -> dict[str, Any]:
    """The manifest's "lora" key: the folder, the dtype, the engine's rank and modules, and name -> task id."""
    return {
        "dir": LORA_SUBDIR,
        "dtype": shape.dtype,
        "max_lora_rank": shape.max_rank,
        "target_modules": list(shape.target_modules or ()),
        "task_ids": {a.name: a.task_id for a in adapters},
        "adapters": [a.model_dump() for a in adapters],
    }


def adapters_for_checkpoint(specs: list[str], hf_config: dict[str, Any], dtype: str,
                            checkpoint_format: str) -> tuple[list[AdapterRef], LoraShape | None]:
    """`convert --lora`: the adapters numbered and checked against the HF config (hidden size, layers) in the
    checkpoint's dtype, before the model is loaded; ([], None) without adapters."""
    if not specs:
        return [], None
    if checkpoint_format != "trtllm":
        raise InvalidInputError("--lora converts adapters into NVIDIA's format for a TensorRT-LLM checkpoint; the PyTorch "
                                "backend reads PEFT folders as they are.",
                                hint="Drop --lora here and give the adapters to `pipeline build --backend pytorch --lora ...`.")
    text = hf_config.get("text_config") if isinstance(hf_config.get("text_config"), dict) else hf_config
    shape = LoraShape(hidden_size=int(text["hidden_size"]), num_layers=int(text["num_hidden_layers"]), dtype=dtype)
    refs = parse_adapters(specs)
    convert_adapters(refs, shape)
    return refs, shape

"""`pipeline build --backend pytorch --lora ...`: the PyTorch-backend deployable's `lora_config` and the
PEFT adapters it carries (<deploy>/lora/<name>/, copies of each adapter folder: the LLM API reads HF PEFT
folders itself, as `lora_dir` at load and as a request's `LoRARequest.lora_path`).

LoraConfig's fields (lora_dir, max_lora_rank, lora_target_modules, max_loras, max_cpu_loras) are rows of
pipeline/data/trtllm_llm_args.tsv (class LoraConfig, NVIDIA/TensorRT-LLM tensorrt_llm/lora_helper.py), so
check_options checks them like every other key. CUDA graphs go off: TensorRT-LLM 1.1.0's feature matrix has
LoRA x CUDA Graph = "No" (https://nvidia.github.io/TensorRT-LLM/1.1.0/features/feature-combination-matrix.html),
and `cuda_graph_config: null` is how the options say it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pipeline.build.llm_args import check_options
from pipeline.build.lora_build import LoraPlan
from pipeline.convert.lora_set import LORA_SUBDIR


def adapter_dir(deploy_dir: Path, name: str) -> Path:
    return Path(deploy_dir) / LORA_SUBDIR / name


def with_lora(options: dict[str, Any], why: dict[str, str], lora: LoraPlan | None,
              deploy_dir: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """options and why with lora_config and CUDA graphs off (unchanged without adapters)."""
    if lora is None:
        return options, why
    count = len(lora.adapters)
    options = {**options, "cuda_graph_config": None, "lora_config": {
        "lora_dir": [str(adapter_dir(deploy_dir, a.name)) for a in lora.adapters],
        "max_lora_rank": lora.shape.max_rank,
        "max_loras": count,
        "max_cpu_loras": count,
        "lora_target_modules": list(lora.shape.target_modules or ()),
    }}
    why = {**why,
           "cuda_graph_config": "off: TensorRT-LLM 1.1.0's feature matrix has LoRA x CUDA graph = No",
           "lora_config": f"{count} adapter(s) in lora/, every one resident on the GPU (max_loras) and on the host "
           "(max_cpu_loras); requests pick one with a LoRARequest"}
    check_options(options)
    return options, why


def copy_adapters(lora: LoraPlan | None, deploy_dir: Path) -> None:
    """<deploy>/lora/<name>/: each PEFT adapter's files (no-op without adapters)."""
    for ref in (lora.refs if lora else []):
        target = adapter_dir(deploy_dir, ref.name)
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(Path(ref.path).iterdir()):
            if path.is_file():
                shutil.copy2(path, target / path.name)


def lora_extra(lora: LoraPlan | None, deploy_dir: Path) -> dict[str, Any]:
    """The deployable manifest's "lora" (name -> task id, and each adapter's folder: a LoRARequest's lora_path);
    {} without adapters."""
    if lora is None:
        return {}
    record = lora.record()
    for adapter in record["adapters"]:
        adapter["path"] = str(adapter_dir(deploy_dir, adapter["name"]))
    return {"lora": record}

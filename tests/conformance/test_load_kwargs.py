"""What convert passes to `from_pretrained` for the GPU path (pipeline.quantization.modelopt.from_pretrained_kwargs:
dtype, device_map="auto", accelerate's max_memory as byte counts) is read the same by transformers
4.57.1 + accelerate 1.7 (TensorRT-LLM 1.1's pins, in the second environment of
scripts/trtllm11_venv.sh) as by the pipeline's transformers 5. No GPU here: the max_memory names only
"cpu", so accelerate's device map puts every module on the CPU; the keyword names and value types are
those of the GPU path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_gpu_load_kwargs_read_the_same_under_4_57(tiny_ckpt: Path, probe) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from pipeline.placement import Footprint, Placement
    from pipeline.quantization.modelopt import from_pretrained_kwargs

    footprint = Footprint(params=1, load_dtype="float16", weights=2, per_sample=1, per_forward=0, export_transient=0,
                          export_rank_host=0, checkpoint=0, seq_len=8)
    placement = Placement(asked="cuda", device="cuda", gpus=(), max_memory={"cpu": 1 << 30}, batch_size=1,
                          footprint=footprint, needed={}, free={})
    kwargs = from_pretrained_kwargs("float16", placement)
    assert kwargs == {"dtype": torch.float16, "trust_remote_code": False, "low_cpu_mem_usage": True,
                      "device_map": "auto", "max_memory": {"cpu": 1 << 30}}

    seen = probe("load", str(tiny_ckpt), json.dumps({**kwargs, "dtype": "float16"}))
    assert seen["transformers"] == "4.57.1" and seen["accelerate"] == "1.7.0"
    assert seen["dtype"] == "torch.float16" and seen["devices"] == ["cpu"]
    assert seen["hf_device_map"] == {"": "cpu"}  # 4.57.1 ran accelerate's auto device map

    model = AutoModelForCausalLM.from_pretrained(tiny_ckpt, **kwargs)  # transformers 5, the pipeline's own
    assert next(model.parameters()).dtype == torch.float16 and {str(p.device) for p in model.parameters()} == {"cpu"}

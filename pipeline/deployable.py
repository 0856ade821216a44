"""Names shared by the stages that write and read TensorRT-LLM PyTorch-backend artifacts.

A PyTorch-backend deployable has no engine: it is a ModelOpt unified HF checkpoint (hard-linked
into `model/`) and the LLM-API options the planner chose (`llm_api_options.yaml`, the file
`trtllm-serve --extra_llm_api_options` reads and the Triton LLM-API model's `model.yaml` carries)."""

from __future__ import annotations

from typing import Literal

CheckpointFormat = Literal["trtllm", "hf"]
Backend = Literal["tensorrt", "pytorch"]

TRTLLM_FORMAT: CheckpointFormat = "trtllm"
HF_FORMAT: CheckpointFormat = "hf"
HF_CHECKPOINT_PREFIX = "hf-"  # checkpoint ids of --format hf start with this

MODEL_SUBDIR = "model"
OPTIONS_FILE = "llm_api_options.yaml"

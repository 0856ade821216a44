"""What `pipeline convert` is asked (ConvertSpec), what it decides before any work (ConvertDecisions)
and what it answers (ConvertResult); pipeline.convert runs the stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from pipeline.quantization.calibration import DEFAULT_CALIB_SIZE, CalibrationSet
from pipeline.convert.lora_set import AdapterRef, LoraShape
from pipeline.hf.compat import RopeSettings
from pipeline.placement import Device
from pipeline.core.quant import KvCacheFormat, QuantFormat

Dtype = Literal["float16", "bfloat16"]


class ConvertSpec(BaseModel):
    """What to convert and how. `root` is the build/ root (default: pipeline.core.paths.build_root())."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="an HF checkpoint folder, or a download source (hf:, local:, gguf:, demo)")
    quant: str = "fp16"
    kv_cache: Optional[str] = None
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    gpu: Optional[str] = None
    calib_data: Optional[Path] = None
    calib_size: int = Field(DEFAULT_CALIB_SIZE, ge=1)
    calib_batch_size: int = Field(4, ge=0, description="samples per calibration forward pass; 0 = as many as fit")
    calib_max_len: int = Field(256, ge=8)
    dtype: Optional[Dtype] = None
    device: Device = Field("auto", description="auto: the GPUs when the model fits them, else the CPU (with a warning)")
    force: bool = False
    root: Optional[Path] = None
    format: str = Field("trtllm", description="trtllm: TensorRT-LLM checkpoint; hf: ModelOpt unified HF checkpoint")
    lora: tuple[str, ...] = Field((), description="[NAME=]PATH of PEFT adapters to convert into <checkpoint>/lora/<task_id>/")


class ConvertResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    ckpt_id: str
    path: Path
    hf_dir: Path
    quant: str
    kv_cache: str
    tp: int
    pp: int
    dtype: str
    quant_algo: Optional[str]
    kv_cache_quant_algo: Optional[str]
    ranks: int
    bytes: int
    calibration: Optional[dict[str, Any]]
    skipped: bool  # True when an identical, intact checkpoint was already there
    duration_s: float
    peak_rss_mb: Optional[float] = None
    device: Optional[str] = None  # where the model ran ("cpu" / "cuda"); None for a no-op
    format: str = "trtllm"


class ConvertDecisions(BaseModel):
    """Everything decided before any work: validated formats, source and identity."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    format: str
    fmt: QuantFormat
    kv: KvCacheFormat
    dtype: Dtype
    hf_dir: Path
    model: str
    decoder_type: str
    hf_config: dict[str, Any]
    rope: RopeSettings
    calibration: Optional[CalibrationSet]
    awq_block: Optional[int]
    inputs: dict[str, Any]
    inputs_hash: str
    ckpt_id: str
    out: Path
    lora: list[AdapterRef] = []  # --lora, numbered (pipeline/convert/lora_set.py)
    lora_shape: Optional[LoraShape] = None

"""What `evaluate` measures (EvaluateSpec, validated once and passed whole) and what it returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from pipeline.quantization.calibration import DEFAULT_CALIB_SIZE
from pipeline.placement import Device
from pipeline.core.quant import kv_cache_format
from pipeline.quantization.simulated import Variant

DEFAULT_MAX_DELTA = 0.10


class EvaluateSpec(BaseModel):
    """What to measure. `model` is an HF checkpoint folder or a `pipeline download` SOURCE."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    variants: tuple[Variant, ...] = Field(min_length=1)
    data: Optional[Path] = None  # .txt (paragraphs split on blank lines) or .jsonl ("text" field)
    max_delta: float = Field(DEFAULT_MAX_DELTA, ge=0)
    calib_size: int = Field(DEFAULT_CALIB_SIZE, ge=1, description="calibration texts for formats that calibrate")
    calib_data: Optional[Path] = None  # as `pipeline convert --calib-data`; default: the shipped set
    calib_max_len: int = Field(256, ge=8)
    max_len: int = Field(512, ge=8, description="evaluation window in tokens (longer texts are split)")
    max_texts: Optional[int] = Field(None, ge=1, description="use only the first N evaluation texts")
    batch_size: int = Field(4, ge=1)
    device: Device = Field("auto", description="auto: the GPUs when the model fits them, else the CPU (with a warning)")
    out: Optional[Path] = None  # reports root; default build/<model>/reports
    force: bool = False

    @classmethod
    def from_formats(cls, model: str, quants: list[str], kv_cache: str | None = None, **kwargs: Any) -> "EvaluateSpec":
        """One variant per --quant, all with the same --kv-cache (duplicates dropped, order kept)."""
        kv = kv_cache_format(kv_cache).name
        variants: list[Variant] = []
        for quant in quants:
            variant = Variant(quant=quant, kv_cache=kv)
            if variant not in variants:
                variants.append(variant)
        return cls(model=model, variants=tuple(variants), **kwargs)


class FormatResult(BaseModel):
    """One row: the baseline or one variant."""

    model_config = ConfigDict(frozen=True)

    name: str
    quant: str
    kv_cache: str
    simulation: str  # how this row was computed
    perplexity: float
    delta: float  # relative perplexity change vs the baseline
    top1_agreement: float
    top1_accuracy: float
    tokens: int
    kv_measured: Optional[bool] = None  # None: KV cache not quantized; False: asked for but never ran
    kv_quantizer_calls: int = 0
    note: Optional[str] = None
    quantize_s: float = 0.0
    eval_s: float = 0.0
    passed: bool = True


class EvaluateResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    hf_dir: Path
    dataset: dict[str, Any]  # name, sha256, texts, windows, tokens
    baseline: FormatResult
    formats: tuple[FormatResult, ...]
    max_delta: float
    passed: bool
    failed: tuple[str, ...]
    report_dir: Path
    reports: dict[str, Path]
    inputs_hash: str
    cached: bool = False

    def rows(self) -> list[FormatResult]:
        return [self.baseline, *self.formats]

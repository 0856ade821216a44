"""A quantized checkpoint's numerics on the CPU, for the reference runtime and for `evaluate`.

`load_reference_model` returns a transformers model whose Linear layers (and, with a quantized KV
cache, attention K/V) carry ModelOpt's calibrated fake quantizers: the same `quantize_model` call,
config and calibration texts that `pipeline convert` uses before it exports the TensorRT-LLM
checkpoint. Values are rounded to the format's grid with its scales, arithmetic stays fp32, so
outputs follow the quantized model while speed does not (see `greedy_speed`: fake quantization
adds work on the CPU, it saves none).
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Optional

from pydantic import BaseModel, ConfigDict, field_validator

from pipeline.core.quant import KvCacheFormat, QuantFormat, kv_cache_format, quant_format
from pipeline.quantization.modelopt import CalibrationRun

BASELINE_DTYPE = "float32"  # CPU matmuls in fp16 are slow and not what a GPU does; values are rounded instead
DEFAULT_SPEED_PROMPT = "Write a short paragraph about the history of the printing press and why it mattered."


class Variant(BaseModel):
    """One precision to measure: weight/activation format plus KV-cache format."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    quant: str
    kv_cache: str = "auto"

    @field_validator("quant")
    @classmethod
    def _known_quant(cls, value: str) -> str:
        return quant_format(value).name

    @field_validator("kv_cache")
    @classmethod
    def _known_kv(cls, value: str) -> str:
        return kv_cache_format(value).name

    @property
    def name(self) -> str:
        return self.quant if self.kv_cache == "auto" else f"{self.quant}+kv_{self.kv_cache}"

    @property
    def fmt(self) -> QuantFormat:
        return quant_format(self.quant)

    @property
    def kv(self) -> KvCacheFormat:
        return kv_cache_format(self.kv_cache)


def calibration_texts(size: int, path: Path | None = None) -> list[str]:
    """The first `size` calibration texts, read the way `pipeline convert` reads them (shipped set or path)."""
    from pipeline.quantization.calibration import load_calibration

    return list(load_calibration(path, size).texts)


@contextmanager
def count_kv_quantizer_calls(model: Any) -> Iterator[dict[str, int]]:
    """Count forward calls of enabled attention K/V quantizers (k_bmm_quantizer / v_bmm_quantizer)
    while the block runs: {"quantizers": how many are enabled, "calls": how many times they ran}."""
    counts = {"quantizers": 0, "calls": 0}
    handles = []

    def hook(*_: Any) -> None:
        counts["calls"] += 1

    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in {"k_bmm_quantizer", "v_bmm_quantizer"} and getattr(module, "is_enabled", False):
            counts["quantizers"] += 1
            handles.append(module.register_forward_hook(hook))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


def round_weights(model: Any, dtype_name: str) -> Any:
    """Round every floating parameter to dtype_name and back (a 16-bit checkpoint's weights, fp32 compute)."""
    import torch

    from pipeline.quantization.modelopt import torch_dtype

    dtype = torch_dtype(dtype_name)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point():
                parameter.copy_(parameter.to(dtype).to(parameter.dtype))
    return model


def simulated_model(
    hf_dir: Path, variant: Variant, calibration: CalibrationRun = CalibrationRun(), *, placement: Any = None
) -> tuple[Any, Any]:
    """(model, tokenizer) with variant's numerics simulated in fp32 (on the CPU, or where a
    `pipeline.placement.Placement` puts it): weights rounded to fp16/bf16 for the 16-bit formats;
    ModelOpt fake quantization (pipeline.quantization.modelopt) otherwise, calibrated as `calibration` says (its
    texts are used only by the formats that need calibration); for formats whose weights trtllm-build
    quantizes (int4_wo), that rounding is applied to the weights."""
    from pipeline.core.quant import WEIGHTS_PACKED_AT_BUILD
    from pipeline.quantization.modelopt import load_hf_model, quantize_model

    model, tokenizer = load_hf_model(hf_dir, BASELINE_DTYPE, placement)
    fmt, kv = variant.fmt, variant.kv
    if not fmt.is_quantized:
        round_weights(model, "bfloat16" if fmt.name == "bf16" else "float16")
    if fmt.is_quantized or kv.kv_cache_quant_algo is not None:
        needs_texts = fmt.needs_calibration or kv.kv_cache_quant_algo
        model = quantize_model(model, tokenizer, fmt, kv, calibration if needs_texts else replace(calibration, texts=()))
    if fmt.name in WEIGHTS_PACKED_AT_BUILD:
        round_weights_per_channel(model, fmt.weight_bits)
    return model, tokenizer


def round_weights_per_channel(model: Any, bits: int) -> Any:
    """Round each quantized Linear's weight to symmetric per-output-channel integers of `bits`
    (scale = max|w| / (2^(bits-1) - 1)), what trtllm-build does to a W4A16 checkpoint's 16-bit weights."""
    import torch

    from pipeline.quantization.modelopt import _quantized_linears

    top = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for _, module in _quantized_linears(model):
            weight = module.weight
            scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / top
            weight.copy_((weight / scale).round().clamp(-top - 1, top) * scale)
    return model


def simulation_note(variant: Variant) -> str:
    from pipeline.core.quant import WEIGHTS_PACKED_AT_BUILD

    fmt = variant.fmt
    if not fmt.is_quantized:
        how = f"weights rounded to {fmt.name}, fp32 compute"
    elif fmt.name in WEIGHTS_PACKED_AT_BUILD:
        how = (
            f"weights rounded to per-channel symmetric INT{fmt.weight_bits} (scale = max|w|/{2 ** (fmt.weight_bits - 1) - 1}) "
            "as trtllm-build packs them (ModelOpt leaves this format's checkpoint weights 16-bit), fp32 compute"
        )
    else:
        how = f"ModelOpt fake quantization ({fmt.modelopt_config}), fp32 compute"
    if variant.kv.kv_cache_quant_algo:
        how += f"; KV cache {variant.kv.name} via ModelOpt k/v_bmm_quantizers"
    return how


def load_reference_model(
    hf_dir: Path | str,
    quant: str = "fp16",
    kv_cache: str | None = None,
    calib_texts: list[str] | None = None,
    *,
    calib_size: int = 64,
    calib_max_len: int = 256,
) -> tuple[Any, Any]:
    """(model, tokenizer) on the CPU, fp32 compute, eval mode, sdpa attention, with `quant` (+`kv_cache`)
    simulated by ModelOpt fake quantization. fp16/bf16 round the weights to that dtype.

    calib_texts None: the first `calib_size` texts of the shipped calibration set (what `convert`
    uses by default). Works with transformers' continuous batching (`init_continuous_batching`):
    the K/V quantizers follow the attention implementation the model runs with.
    """
    variant = Variant(quant=quant_format(quant).name, kv_cache=kv_cache_format(kv_cache).name)
    needs = variant.fmt.needs_calibration or variant.kv.kv_cache_quant_algo is not None
    texts = list(calib_texts) if calib_texts is not None else (calibration_texts(calib_size) if needs else [])
    model, tokenizer = simulated_model(Path(hf_dir), variant, CalibrationRun(texts=tuple(texts), max_len=calib_max_len))
    return (fold_quantized_weights(model) if variant.fmt.is_quantized else model), tokenizer


def fold_quantized_weights(model: Any) -> Any:
    """Put each Linear's weight on its calibrated quantizer's grid once, in place, and switch that weight
    quantizer off (ModelOpt's `fold_weight`). Unfolded, ModelOpt fake-quantizes every weight at every forward
    call: the whole model again for each decoded token, most of a simulated decode step on the CPU. The
    weights are the values the quantizer gave at each call; activation and K/V quantizers stay as they are.

    Each weight first gets storage of its own: a loaded weight can be a view into the checkpoint file at an
    offset that is not 64-byte aligned, and the CPU GEMM rounds differently on such an operand than on the
    freshly allocated one the quantizer returned (1e-6, which fp8/int8 activation rounding can turn into
    another token). So the logits are the unfolded model's, bit for bit."""
    from pipeline.quantization.modelopt import _quantized_linears, quiet_modelopt_import

    for _, module in _quantized_linears(model):
        module.weight.data = module.weight.data.clone()
    quiet_modelopt_import().fold_weight(model)
    return model


class SpeedResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    tokens_per_s: float  # median over runs, decode + prefill of a short prompt, batch 1
    runs: tuple[float, ...]
    new_tokens: int
    prompt_tokens: int
    load_s: float  # load + quantize + calibrate
    threads: int


@dataclass(frozen=True)
class SpeedRun:
    """What greedy_speed times: greedy generation of exactly `new_tokens` from `prompt`, `repeats` times."""

    new_tokens: int = 32
    repeats: int = 3
    prompt: str = DEFAULT_SPEED_PROMPT


def greedy_speed(model: Any, tokenizer: Any, run: SpeedRun = SpeedRun(), *, name: str, load_s: float = 0.0) -> SpeedResult:
    """Greedy generation tokens/s at batch 1 (exactly run.new_tokens each run; one warm-up run first)."""
    import torch

    new_tokens = run.new_tokens
    ids = tokenizer(run.prompt, return_tensors="pt")
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  pad_token_id=tokenizer.pad_token_id)
    runs = []
    with torch.no_grad():
        model.generate(**ids, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})
        for _ in range(run.repeats):
            start = time.perf_counter()
            model.generate(**ids, **kwargs)
            runs.append(new_tokens / (time.perf_counter() - start))
    return SpeedResult(
        name=name, tokens_per_s=round(statistics.median(runs), 2), runs=tuple(round(r, 2) for r in runs),
        new_tokens=new_tokens, prompt_tokens=int(ids["input_ids"].shape[1]), load_s=round(load_s, 2),
        threads=torch.get_num_threads(),
    )


def measure_speed(
    hf_dir: Path | str, quants: list[str], *, kv_cache: Optional[str] = None, new_tokens: int = 32, repeats: int = 3,
    calib_size: int = 64,
) -> list[SpeedResult]:
    """greedy_speed for each format, loaded with load_reference_model (one model in memory at a time)."""
    import gc

    run = SpeedRun(new_tokens=new_tokens, repeats=repeats)
    results = []
    for quant in quants:
        start = time.perf_counter()
        model, tokenizer = load_reference_model(hf_dir, quant, kv_cache, calib_size=calib_size)
        load_s = time.perf_counter() - start
        label = quant if not kv_cache or kv_cache_format(kv_cache).kv_cache_quant_algo is None else f"{quant}+kv_{kv_cache}"
        results.append(greedy_speed(model, tokenizer, run, name=label, load_s=load_s))
        del model
        gc.collect()
    return results

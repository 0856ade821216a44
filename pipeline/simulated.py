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
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.quant import kv_cache_format, quant_format

DEFAULT_SPEED_PROMPT = "Write a short paragraph about the history of the printing press and why it mattered."


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
    from pipeline.evaluate import Variant, calibration_texts, simulated_model

    variant = Variant(quant=quant_format(quant).name, kv_cache=kv_cache_format(kv_cache).name)
    needs = variant.fmt.needs_calibration or variant.kv.kv_cache_quant_algo is not None
    texts = list(calib_texts) if calib_texts is not None else (calibration_texts(calib_size) if needs else [])
    return simulated_model(Path(hf_dir), variant, texts, calib_max_len=calib_max_len)


class SpeedResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    tokens_per_s: float  # median over runs, decode + prefill of a short prompt, batch 1
    runs: tuple[float, ...]
    new_tokens: int
    prompt_tokens: int
    load_s: float  # load + quantize + calibrate
    threads: int


def greedy_speed(
    model: Any, tokenizer: Any, *, name: str, new_tokens: int = 32, repeats: int = 3,
    prompt: str = DEFAULT_SPEED_PROMPT, load_s: float = 0.0,
) -> SpeedResult:
    """Greedy generation tokens/s at batch 1 (exactly new_tokens each run; one warm-up run first)."""
    import torch

    ids = tokenizer(prompt, return_tensors="pt")
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  pad_token_id=tokenizer.pad_token_id)
    runs = []
    with torch.no_grad():
        model.generate(**ids, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})
        for _ in range(repeats):
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

    results = []
    for quant in quants:
        start = time.perf_counter()
        model, tokenizer = load_reference_model(hf_dir, quant, kv_cache, calib_size=calib_size)
        load_s = time.perf_counter() - start
        label = quant if not kv_cache or kv_cache_format(kv_cache).kv_cache_quant_algo is None else f"{quant}+kv_{kv_cache}"
        results.append(greedy_speed(model, tokenizer, name=label, new_tokens=new_tokens, repeats=repeats, load_s=load_s))
        del model
        gc.collect()
    return results

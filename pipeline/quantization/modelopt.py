"""Load a Hugging Face causal LM and quantize it with NVIDIA ModelOpt (the path TensorRT-LLM's own
quantize script takes): pick the ModelOpt config for a `--quant` format, add the KV-cache quantizers,
fix the AWQ block size for the model, then `mtq.quantize(model, cfg, forward_loop)`.

Used by the `convert` stage (then `export_tensorrt_llm_checkpoint`) and by `evaluate` (to measure
what a format does to accuracy). Heavy imports (torch, transformers, modelopt) happen inside the
functions so importing this module stays cheap.

How each format is produced (checked against TensorRT-LLM's `quantize_by_modelopt.py` and the
installed ModelOpt 0.47):
- fp16 / bf16: no quantizer; the export casts weights to the dtype.
- fp8, int8_sq, int4_awq, w4a8_awq, nvfp4: the ModelOpt preset named in `pipeline.core.quant`.
- int8_wo: ModelOpt's INT8_WEIGHT_ONLY_CFG (per-channel int8 weights, no activation quantizer); the
  export writes int8 weights and quant_algo W8A16.
- int4_wo: ModelOpt has no per-channel INT4 weight-only preset that its TensorRT-LLM export knows,
  so (as TensorRT-LLM's script does) the weights stay 16-bit and the checkpoint's quant_algo is set
  to W4A16; trtllm-build packs them to int4 when it loads the checkpoint. See `pipeline.core.quant.WEIGHTS_PACKED_AT_BUILD`.
- KV cache fp8 / int8: ModelOpt's attention `k_bmm_quantizer` / `v_bmm_quantizer` with E4M3 or
  8-bit integer, max-calibrated (FP8_KV_CFG, and the same entry with 8 bits for int8).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pipeline.core.errors import InvalidInputError, StageFailedError, UnsupportedError
from pipeline.core.quant import KvCacheFormat, QuantFormat

if TYPE_CHECKING:
    from pipeline.placement import Placement

AWQ_BLOCK_SIZES = (128, 64)

# Row-parallel linears: TensorRT-LLM splits their in-features across tensor-parallel ranks.
_ROW_PARALLEL = ("o_proj", "down_proj", "dense", "c_proj", "dense_4h_to_h", "fc2", "w2")

ProgressFn = Callable[[int, int], None]


def quiet_modelopt_import() -> Any:
    """Import modelopt.torch.quantization without its 'transformers version not tested' warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not tested with current version of modelopt.*")
        import modelopt.torch.quantization as mtq
    return mtq


def torch_dtype(name: str) -> Any:
    import torch

    table = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    try:
        return table[name]
    except KeyError:
        raise InvalidInputError(f"Unknown dtype {name!r}.", hint="Use float16 or bfloat16.") from None


def from_pretrained_kwargs(dtype: str, placement: Placement | None = None) -> dict[str, Any]:
    """The keyword arguments `AutoModelForCausalLM.from_pretrained` gets (the contract the GPU path is
    tested by). On the CPU: the load dtype, no remote code, low_cpu_mem_usage (as before `--device`).
    On GPUs, as NVIDIA's quantize script loads (`device_map="auto"`), with accelerate's `max_memory`
    per GPU from the pre-check (and "cpu" when weights are offloaded). `dtype` is the name both
    transformers 4.57.1 (TensorRT-LLM 1.1's pin) and 5.x read; `torch_dtype` is deprecated in both."""
    kwargs: dict[str, Any] = {"dtype": torch_dtype(dtype), "trust_remote_code": False, "low_cpu_mem_usage": True}
    if placement is not None and placement.device == "cuda":
        kwargs["device_map"] = "auto"
        kwargs["max_memory"] = placement.accelerate_max_memory()
    return kwargs


def load_hf_model(hf_dir: Path | str, dtype: str = "float16", placement: Placement | None = None) -> tuple[Any, Any]:
    """Load (model, tokenizer) from a local Hugging Face checkpoint folder, eval mode: on the CPU, or
    across the GPUs a `pipeline.placement.Placement` names.

    trust_remote_code is off: only architectures transformers itself implements are loaded.
    The tokenizer pads on the left and falls back to the EOS token for padding.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    folder = Path(hf_dir)
    if not (folder / "config.json").is_file():
        raise InvalidInputError(
            f"{folder} is not a Hugging Face checkpoint: config.json is missing.",
            hint="Point --model at a folder made by `pipeline download` (or any folder with config.json and *.safetensors).",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False, padding_side="left")
        kwargs = from_pretrained_kwargs(dtype, placement)
        kwargs.pop("trust_remote_code")  # stated at the call itself, where the security audit reads it
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=False, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise StageFailedError(
            f"Could not load the checkpoint in {folder}: {error}",
            hint="Check the folder holds a complete checkpoint (config.json, *.safetensors, tokenizer files); "
            "re-run `pipeline download --force` if a file is damaged.",
        ) from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


def model_device(model: Any) -> Any:
    """Where a model's inputs go: the device of its first parameter (the embedding, under a device_map)."""
    return getattr(model, "device", None)


def free_gpu_memory() -> dict[int, int]:
    """Free bytes per CUDA device now (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    return {index: int(torch.cuda.mem_get_info(index)[0]) for index in range(torch.cuda.device_count())}


def prepare_for_export(model: Any, on_gpus: bool) -> None:
    """Before `export_tensorrt_llm_checkpoint`: a model loaded on GPUs with a device_map loses its
    accelerate hooks, which puts offloaded weights back in place (NVIDIA's quantize_by_modelopt.py
    @042c510d does it unconditionally: "Move meta tensor back to device before exporting"; a model
    without hooks is left as it is); then the calibration's leftovers are released so the export's
    buffers have the memory."""
    import gc

    import torch

    if on_gpus:  # transformers 5 dispatches (adds hooks) only for a map over more than one device
        from accelerate.hooks import remove_hook_from_module

        remove_hook_from_module(model, recurse=True)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _quantized_linears(model: Any) -> list[tuple[str, Any]]:
    """The Linear layers a quantization preset touches: everything but the LM head."""
    import torch

    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and "lm_head" not in name and "output_layer" not in name
    ]


def awq_block_size(model: Any, tp: int = 1) -> int:
    """AWQ block size for a loaded model (see `choose_awq_block`)."""
    return choose_awq_block({name: module.in_features for name, module in _quantized_linears(model)}, tp)


def choose_awq_block(in_features: dict[str, int], tp: int = 1) -> int:
    """128 when every quantized in-feature divides by 128, else 64, else an UnsupportedError.

    in_features maps a linear layer's name to its full in-feature count. Row-parallel layers
    (o_proj, down_proj, ...) are split across tensor-parallel ranks, so their per-rank share counts.
    """
    per_rank: dict[str, float] = {}
    for name, features in in_features.items():
        row_parallel = name.rsplit(".", 1)[-1] in _ROW_PARALLEL
        per_rank[name] = features / tp if row_parallel else features
    for block in AWQ_BLOCK_SIZES:
        if all(float(f).is_integer() and int(f) % block == 0 for f in per_rank.values()):
            return block
    smallest = AWQ_BLOCK_SIZES[-1]
    bad = sorted({f"{f:g}" for f in per_rank.values() if not (float(f).is_integer() and int(f) % smallest == 0)})
    raise UnsupportedError(
        f"INT4 AWQ needs every quantized in-feature (per tensor-parallel rank) to divide by "
        f"{' or '.join(map(str, AWQ_BLOCK_SIZES))}; this model has in-features {', '.join(bad)} at tp={tp}.",
        hint="Use int8_wo, int8_sq or fp8 for this model, or a tp size that keeps the split in-features a multiple of 64.",
    )


def modelopt_config(fmt: QuantFormat, kv: KvCacheFormat, *, awq_block: int | None = None) -> dict[str, Any] | None:
    """The ModelOpt quantize config for a format plus KV cache, or None when nothing is quantized."""
    mtq = quiet_modelopt_import()
    attribute = fmt.modelopt_config
    if attribute is None and kv.kv_cache_quant_algo is None:
        return None
    if attribute is None:  # 16-bit weights, quantized KV cache only
        cfg: dict[str, Any] = {"quant_cfg": [{"quantizer_name": "*", "enable": False}], "algorithm": "max"}
    else:
        cfg = copy.deepcopy(getattr(mtq, attribute))
    if "awq" in fmt.name:
        if awq_block is None:
            raise ValueError("awq_block is required for AWQ formats")
        _set_awq_block(cfg, awq_block)
    kv_entries = kv_cache_entries(kv)
    if kv_entries:
        cfg["quant_cfg"] = list(cfg["quant_cfg"]) + kv_entries
    return cfg


def kv_cache_entries(kv: KvCacheFormat) -> list[dict[str, Any]]:
    """ModelOpt quant_cfg entries for the attention K/V quantizers (empty for a 16-bit KV cache)."""
    if kv.kv_cache_quant_algo is None:
        return []
    if kv.name == "fp8":
        return copy.deepcopy(list(quiet_modelopt_import().FP8_KV_CFG["quant_cfg"]))
    if kv.name == "int8":
        return [{"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}}]
    raise UnsupportedError(f"KV-cache format {kv.name} has no ModelOpt quantizer here.", hint="Use fp8 or int8.")


def _set_awq_block(cfg: dict[str, Any], block: int) -> None:
    for entry in cfg["quant_cfg"]:
        if entry.get("quantizer_name") != "*weight_quantizer" or "cfg" not in entry:
            continue
        attrs = entry["cfg"] if isinstance(entry["cfg"], list) else [entry["cfg"]]
        for attr in attrs:
            sizes = attr.get("block_sizes")
            if sizes and -1 in sizes:
                sizes[-1] = block
            elif sizes and "-1" in sizes:
                sizes["-1"] = block


def calibration_batches(
    tokenizer: Any, texts: list[str], *, batch_size: int, max_len: int, device: Any = None
) -> list[dict[str, Any]]:
    """Tokenized calibration batches (left-padded, truncated to max_len), on `device` when one is
    given and is not the CPU (the model's input device under a device_map)."""
    batches = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        encoded = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True, max_length=max_len)
        batch = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
        if device is not None and str(device) != "cpu":
            batch = {key: value.to(device) for key, value in batch.items()}
        batches.append(batch)
    return batches


def forward_splitting_on_oom(model: Any, batch: dict[str, Any], counter: dict[str, int] | None = None) -> None:
    """model(**batch); a batch that runs out of GPU memory is run again as two halves (recursively),
    as NVIDIA's calibrate_loop does (quantize_by_modelopt.py @042c510d). A CPU out-of-memory is the
    kernel's kill and cannot be caught: the pre-check sizes the CPU batch instead."""
    import torch

    try:
        model(**batch)
        return
    except torch.cuda.OutOfMemoryError:
        rows = int(batch["input_ids"].shape[0])
        if rows == 1:
            raise
    torch.cuda.empty_cache()
    if counter is not None:
        counter["splits"] = counter.get("splits", 0) + 1
    half = rows // 2
    for part in (slice(0, half), slice(half, rows)):
        forward_splitting_on_oom(model, {key: value[part] for key, value in batch.items()}, counter)


@dataclass(frozen=True)
class CalibrationRun:
    """How quantize_model calibrates: the texts, samples per forward pass, tokens per sample, the
    tensor-parallel size (the AWQ block must split across it) and `progress(done, total)`, called
    after each calibration batch."""

    texts: tuple[str, ...] = ()
    batch_size: int = 4
    max_len: int = 256
    tp: int = 1
    progress: ProgressFn | None = None


def quantize_model(
    model: Any,
    tokenizer: Any,
    fmt: QuantFormat,
    kv: KvCacheFormat,
    calibration: CalibrationRun = CalibrationRun(),
    stats: dict[str, int] | None = None,
) -> Any:
    """Quantize model in place with ModelOpt for fmt (+ kv) and return it.

    Formats with no ModelOpt quantizer (fp16, bf16, int4_wo without a quantized KV cache) return the
    model untouched. `calibration.progress(done, total)` is called after each calibration batch.
    Weight-only int8 needs no calibration data; the others run a forward pass over calibration.texts.
    On a GPU the batches go to the model's input device and a batch that runs out of memory is split
    (counted in `stats["splits"]`); on the CPU the forward pass is exactly `model(**batch)`.
    """
    import torch

    calib_texts, progress = list(calibration.texts), calibration.progress
    block = awq_block_size(model, calibration.tp) if "awq" in fmt.name else None
    cfg = modelopt_config(fmt, kv, awq_block=block)
    if cfg is None:
        return model
    mtq = quiet_modelopt_import()
    needs_data = fmt.needs_calibration or kv.kv_cache_quant_algo is not None
    if needs_data and not calib_texts:
        raise InvalidInputError(
            f"{fmt.name} (KV cache {kv.name}) needs calibration data and none was given.",
            hint="Leave --calib-data unset to use the shipped calibration set, or give a file with text in it.",
        )
    device = model_device(model)
    on_gpu = device is not None and getattr(device, "type", str(device)) == "cuda"
    batches = (
        calibration_batches(tokenizer, calib_texts, batch_size=calibration.batch_size, max_len=calibration.max_len,
                            device=device if on_gpu else None)
        if needs_data else []
    )

    def forward_loop(m: Any) -> None:
        with torch.no_grad():
            for index, batch in enumerate(batches, 1):
                if on_gpu:
                    forward_splitting_on_oom(m, batch, stats)
                else:
                    m(**batch)
                if progress is not None:
                    progress(index, len(batches))

    try:
        return mtq.quantize(model, cfg, forward_loop if batches else None)
    except (RuntimeError, ValueError, AssertionError) as error:
        raise StageFailedError(
            f"ModelOpt quantization to {fmt.name} failed: {error}",
            hint="Re-run with --debug for the traceback; try another --quant format or a smaller --calib-size.",
        ) from error


def calibration_steps(fmt: QuantFormat, kv: KvCacheFormat, n_texts: int, batch_size: int) -> int:
    """How many forward passes quantize_model will call progress for (0 when no calibration runs).

    AWQ-lite runs the loop twice (statistics, then the scale search)."""
    if fmt.modelopt_config is None and kv.kv_cache_quant_algo is None:
        return 0
    if not (fmt.needs_calibration or kv.kv_cache_quant_algo is not None):
        return 0
    batches = -(-n_texts // batch_size)
    return batches * (2 if "awq" in fmt.name else 1)


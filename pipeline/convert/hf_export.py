"""`pipeline convert --format hf`: a ModelOpt unified Hugging Face checkpoint, what TensorRT-LLM's
PyTorch backend (the LLM API's default) loads: quantized *.safetensors, hf_quant_config.json,
config.json, generation_config.json and the tokenizer, written by ModelOpt's `export_hf_checkpoint`.

Formats: fp16 / bf16 pass through (weights in that dtype, no hf_quant_config.json); fp8, nvfp4,
int4_awq and w4a8_awq are quantized exactly as for `--format trtllm` (pipeline.quantization.modelopt); the KV
cache is the model's dtype or fp8. Everything else is refused before any work, and so are --tp/--pp:
the PyTorch backend shards one checkpoint at load time.

What ModelOpt 0.47's export writes under transformers 5.24, and what is done about it for TensorRT-LLM
1.1.0's transformers 4.57.1 (pipeline.hf.compat; checked for real in tests/conformance/):
- config.json keeps only transformers 5's `rope_parameters`; 4.57.1 reads top-level rope_theta /
  rope_scaling and would fall back to RoPE base 10000: both are written back beside it.
- config.json says `dtype` (no `torch_dtype`): 4.57.1 reads `dtype` into config.torch_dtype, which
  TensorRT-LLM's ModelConfig uses (bfloat16 when absent), so it is left as it is and checked.
- a quantized export embeds `quantization_config` (quant_method "modelopt") in config.json;
  TensorRT-LLM reads hf_quant_config.json first and both transformers generations load the config
  with it. transformers 5 itself does not know quant_method "modelopt": its from_pretrained warns and
  loads the raw quantized weights unscaled, so only TensorRT-LLM (or ModelOpt) runs these weights.
- no tokenizer is written: the source folder's files are copied, with a tokenizer_class 4.57.1 has.
- a config without `architectures` (converted from GGUF) breaks the export: set from the loaded class.
The quantization config is checked against what the PyTorch backend reads
(pipeline/data/trtllm_pytorch_checkpoint.json).
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from pipeline.core.artifacts import write_json_atomic
from pipeline.core.deployable import (
    HF_CHECKPOINT_PREFIX, HF_FORMAT, HF_KV_CACHE_FORMATS, HF_QUANT_FORMATS, TRTLLM_FORMAT,
)
from pipeline.core.errors import InvalidInputError, StageFailedError, UnsupportedError
from pipeline.hf.compat import compatible_config, compatible_tokenizer_config, read_json_object
from pipeline.core.quant import KvCacheFormat, QuantFormat

FORMATS = (TRTLLM_FORMAT, HF_FORMAT)

# Bump when what --format hf writes changes, so existing hf checkpoints are made again.
HF_EXPORT_VERSION = 1

QUANT_CONFIG = "hf_quant_config.json"
GENERATION_CONFIG = "generation_config.json"
# Tokenizer files copied from the source folder when it has them (the export writes none).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")

FACTS_FILE = Path(__file__).resolve().parent.parent / "data" / "trtllm_pytorch_checkpoint.json"


@lru_cache(maxsize=1)
def facts() -> dict[str, Any]:
    """pipeline/data/trtllm_pytorch_checkpoint.json: what the PyTorch backend reads, with its sources."""
    return json.loads(FACTS_FILE.read_text(encoding="utf-8"))


def checkpoint_format(name: Optional[str]) -> str:
    """--format: trtllm (default) or hf."""
    key = (name or TRTLLM_FORMAT).lower()
    if key not in FORMATS:
        raise InvalidInputError(
            f"Unknown --format {name!r}.",
            hint="Use --format trtllm (a TensorRT-LLM checkpoint for trtllm-build) or --format hf (a ModelOpt unified "
            "HF checkpoint for TensorRT-LLM's PyTorch backend).",
        )
    return key


def check_hf_request(fmt: QuantFormat, kv: KvCacheFormat, tp: int, pp: int) -> None:
    """Refuse (exit 2) what --format hf cannot carry, before any work."""
    if fmt.name not in HF_QUANT_FORMATS:
        raise InvalidInputError(
            f"--format hf cannot carry --quant {fmt.name}: TensorRT-LLM's PyTorch backend loads a ModelOpt HF "
            f"checkpoint in {', '.join(HF_QUANT_FORMATS)}.",
            hint=f"Use --quant one of {', '.join(HF_QUANT_FORMATS)} with --format hf, or --format trtllm for {fmt.name}.",
        )
    if kv.name not in HF_KV_CACHE_FORMATS:
        raise InvalidInputError(
            f"--format hf cannot carry a {kv.name} KV cache: the PyTorch backend's KV cache is the model's dtype or fp8.",
            hint=f"Use --kv-cache fp8 (or leave it unset) with --format hf, or --format trtllm for a {kv.name} KV cache.",
        )
    if tp > 1 or pp > 1:
        raise InvalidInputError(
            f"--format hf writes one unsharded checkpoint; --tp {tp} --pp {pp} was given.",
            hint="Drop --tp/--pp here: the PyTorch backend shards the checkpoint when it loads it; give --tp and --pp to "
            "`pipeline build --backend pytorch`.",
        )


def check_architecture(architecture: str, hf_dir: Path) -> None:
    """Refuse (exit 2) an architecture TensorRT-LLM's PyTorch backend has no model class for (it picks
    the class from config.json's architectures[0]; facts()["architectures"])."""
    table = facts()["architectures"]
    if architecture in table["loaded"]:
        return
    why = table["not_loaded"].get(architecture, "it is not among the classes the PyTorch backend registers")
    raise UnsupportedError(
        f"--format hf: TensorRT-LLM's PyTorch backend cannot load {architecture} ({hf_dir}): {why}.",
        hint=f"--format hf takes {', '.join(table['loaded'])}; use --format trtllm (trtllm-build) for {architecture}.",
    )


def checkpoint_id(quant: str, kv_cache: str, inputs_hash: str) -> str:
    """e.g. `hf-fp8-kvfp8-1a2b3c4d`, `hf-fp16-…`."""
    kv = "" if kv_cache == "auto" else f"-kv{kv_cache}"
    return f"{HF_CHECKPOINT_PREFIX}{quant}{kv}-{inputs_hash[:8]}"


def export(model: Any, dtype: Any, out: Path) -> None:
    """ModelOpt's unified HF export of a (quantized or plain) model into out.

    A config converted from GGUF has no `architectures`; ModelOpt's export iterates it (TypeError on
    None) and TensorRT-LLM picks the model class from architectures[0], so it is set to the class
    transformers loaded."""
    import torch
    from modelopt.torch.export import export_hf_checkpoint

    if not getattr(model.config, "architectures", None):
        model.config.architectures = [type(model).__name__]
    with torch.inference_mode():
        export_hf_checkpoint(model, dtype=dtype, export_dir=out)
    if not (out / "config.json").is_file() or not any(out.glob("*.safetensors")):
        raise StageFailedError(
            f"ModelOpt's HF export wrote {'a' if (out / 'config.json').is_file() else 'no'} config.json and "
            f"{len(list(out.glob('*.safetensors')))} safetensors files.",
            hint="Re-run with --debug; this is a ModelOpt export problem.",
        )


def finish(out: Path, source: Path, fmt: QuantFormat, kv: KvCacheFormat, dtype: str,
           awq_block: Optional[int]) -> tuple[Optional[dict[str, Any]], list[str]]:
    """Make the exported folder read the same under transformers 4.57.1 and 5.x, add the source's
    tokenizer and generation config, and check the quantization config against the PyTorch backend's
    facts; (hf_quant_config's `quantization` or None, one line per change)."""
    changes: list[str] = []
    config_path = out / "config.json"
    config, fixed = compatible_config(out, read_json_object(config_path, hint="This is a ModelOpt export problem."))
    changes += fixed
    if config.get("dtype") != dtype:
        changes.append(f"config.json: dtype {config.get('dtype')!r} -> {dtype!r}")
        config["dtype"] = dtype
    write_json_atomic(config_path, config)
    changes += _copy_tokenizer(source, out)
    changes += _copy_generation_config(source, out)
    quantization = check_quant_config(out, fmt, kv, awq_block)
    if quantization is None and "quantization_config" in config:
        raise StageFailedError(f"ModelOpt's export of {fmt.name} put a quantization_config in config.json but wrote no "
                               f"{QUANT_CONFIG}.", hint="This is a ModelOpt export problem; re-run with --debug.")
    return quantization, changes


def _copy_tokenizer(source: Path, out: Path) -> list[str]:
    copied = [name for name in TOKENIZER_FILES if (source / name).is_file()]
    for name in copied:
        shutil.copyfile(source / name, out / name)
    if not copied:
        raise InvalidInputError(f"{source} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...).",
                                hint="Save the tokenizer beside the model (tokenizer.save_pretrained), or re-run "
                                "`pipeline download --force`.")
    changes = [f"tokenizer: {', '.join(copied)} from {source}"]
    path = out / "tokenizer_config.json"
    if path.is_file():
        fixed, done = compatible_tokenizer_config(out, read_json_object(path, hint="Fix the source's tokenizer_config.json."))
        if done:
            write_json_atomic(path, fixed)
            changes += done
    return changes


def _copy_generation_config(source: Path, out: Path) -> list[str]:
    """The source's generation_config.json (the export writes one derived from the model config: it
    would lose the source's sampling defaults); none when the source has none."""
    if (source / GENERATION_CONFIG).is_file():
        shutil.copyfile(source / GENERATION_CONFIG, out / GENERATION_CONFIG)
        return [f"{GENERATION_CONFIG}: the source's"]
    if (out / GENERATION_CONFIG).is_file():
        (out / GENERATION_CONFIG).unlink()
        return [f"{GENERATION_CONFIG}: removed (the source has none)"]
    return []


def expected_quantization(fmt: QuantFormat, kv: KvCacheFormat, awq_block: Optional[int]) -> Optional[dict[str, Any]]:
    """quant_algo / kv_cache_quant_algo / group_size the PyTorch backend must read for fmt + kv, or None
    when nothing is quantized (no hf_quant_config.json)."""
    table = facts()
    weights = table["formats"].get(fmt.name)
    cache = table["kv_cache"].get(kv.name)
    if weights is None and cache is None:
        return None
    group = weights.get("group_size") if weights else None
    return {
        "quant_algo": weights["quant_algo"] if weights else None,
        "kv_cache_quant_algo": cache["kv_cache_quant_algo"] if cache else None,
        "group_size": awq_block if group == "awq_block_size" else group,
    }


def check_quant_config(folder: Path, fmt: QuantFormat, kv: KvCacheFormat, awq_block: Optional[int]) -> Optional[dict[str, Any]]:
    """hf_quant_config.json's `quantization` as TensorRT-LLM's load_modelopt_quant_config reads it,
    checked against what fmt + kv must give; StageFailedError naming the field otherwise."""
    expected = expected_quantization(fmt, kv, awq_block)
    path = folder / QUANT_CONFIG
    if expected is None:
        if path.exists():
            raise StageFailedError(f"ModelOpt wrote {QUANT_CONFIG} for unquantized {fmt.name}.",
                                   hint="This is a ModelOpt export problem; re-run with --debug.")
        return None
    if not path.is_file():
        raise StageFailedError(f"ModelOpt wrote no {QUANT_CONFIG} for {fmt.name} (KV {kv.name}).",
                               hint="This is a ModelOpt export problem; re-run with --debug.")
    problems, quantization = quant_config_problems(read_json_object(path, hint="This is a ModelOpt export problem."), expected)
    if problems:
        raise StageFailedError(f"{QUANT_CONFIG} is not what TensorRT-LLM's PyTorch backend reads for {fmt.name} "
                               f"(KV {kv.name}): {'; '.join(problems)}.",
                               hint="This is a ModelOpt export problem; re-run with --debug.")
    return quantization


def quant_config_problems(data: dict[str, Any], expected: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(what is wrong, the `quantization` object) of an hf_quant_config.json against the fields the
    PyTorch backend reads (facts()["hf_quant_config"]) and the values expected."""
    spec = facts()["hf_quant_config"]
    missing = [key for key in spec["required"] if not isinstance(data.get(key), dict)]
    if missing:
        return [f"no {' / '.join(missing)} object (load_modelopt_quant_config indexes it)"], {}
    quantization = data["quantization"]
    problems = []
    for dotted, kind in spec["read"].items():
        key = dotted.split(".", 1)[1]
        value = quantization.get(key)
        if not _has_type(value, kind):
            problems.append(f"{key} is {json.dumps(value)}, not {kind}")
    for key, want in expected.items():
        if quantization.get(key) != want:
            problems.append(f"{key} is {json.dumps(quantization.get(key))}, expected {json.dumps(want)}")
    return problems, quantization


def _has_type(value: Any, kind: str) -> bool:
    checks = {"null": value is None, "str": isinstance(value, str), "int": isinstance(value, int) and not isinstance(value, bool),
              "list[str]": isinstance(value, list) and all(isinstance(item, str) for item in value)}
    return any(checks[part] for part in kind.split("|"))

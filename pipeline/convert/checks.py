"""The convert stage's checks on its source, before the model loads: the HF folder (or a download
source fetched into one), its dtype, its architecture against what ModelOpt's TensorRT-LLM export
handles, and tp/pp against its heads and layers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pipeline.core.artifacts import read_manifest
from pipeline.convert.spec import ConvertSpec, Dtype
from pipeline.download import DownloadSpec, download
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.hf.folder import check_checkpoint_folder
from pipeline.hf.compat import causal_lm_class, read_json_object
from pipeline.core.paths import build_root, model_slug
from pipeline.core.quant import QuantFormat
from pipeline.core.reporting import Reporter

# HF architectures ModelOpt's TensorRT-LLM export handles as plain decoder-only models, with the
# decoder type it is given, restricted to those TensorRT-LLM 1.1 builds with trtllm-build. Each one
# has rows in pipeline/data/trtllm_checkpoint_keys.tsv and is converted (fp8 and int8_sq) from a tiny
# model in tests/conformance/.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen",
    "GemmaForCausalLM": "gemma",
    "GPT2LMHeadModel": "gpt",
}

# Architectures TensorRT-LLM 1.1 builds but the installed ModelOpt cannot export to a TensorRT-LLM
# checkpoint (tried on tiny models of each, fp8, ModelOpt 0.47 + transformers 5): refused up front.
NOT_EXPORTABLE: dict[str, str] = {
    "MixtralForCausalLM": "ModelOpt's TensorRT-LLM export fails on transformers 5's fused MoE experts "
                          "(TypeError: object of type 'QuantMixtralExperts' has no len())",
    "Gemma2ForCausalLM": "ModelOpt refuses the TensorRT-LLM checkpoint export for Gemma 2 (it offers only its "
                         "unified HF checkpoint, for TensorRT-LLM's PyTorch backend)",
    "Phi3ForCausalLM": "ModelOpt refuses the TensorRT-LLM checkpoint export for Phi-3 (it offers only its "
                       "unified HF checkpoint, for TensorRT-LLM's PyTorch backend)",
}


def resolve_dtype(fmt: QuantFormat, asked: Optional[str]) -> Dtype:
    implied = {"fp16": "float16", "bf16": "bfloat16"}.get(fmt.name)
    if implied and asked and asked != implied:
        raise InvalidInputError(
            f"--quant {fmt.name} means {implied} weights, but --dtype {asked} was given.",
            hint=f"Drop --dtype, or use --quant {'bf16' if asked == 'bfloat16' else 'fp16'}.",
        )
    return implied or asked or "float16"  # type: ignore[return-value]


def resolve_source(spec: ConvertSpec, reporter: Reporter) -> tuple[Path, str]:
    """(HF folder, model name): a folder is used in place; anything else goes through download."""
    candidate = Path(spec.model).expanduser()
    if candidate.is_dir():
        check_checkpoint_folder(candidate)
        folder = candidate.resolve()
        root = (spec.root or build_root()).resolve()
        # A `pipeline download` folder keeps its <model>; any other folder is named after itself.
        made_by = read_manifest(folder) or {}
        if made_by.get("stage") == "download" and isinstance(made_by.get("model"), str):
            model = model_slug(made_by["model"])
        elif root in folder.parents:
            model = folder.relative_to(root).parts[0]
        else:
            model = model_slug(folder.name)
        return folder, model
    result = download(DownloadSpec(source=spec.model, root=spec.root), reporter)
    return Path(result.path), result.model


def read_hf_config(hf_dir: Path) -> dict[str, Any]:
    return read_json_object(hf_dir / "config.json", hint="Re-run `pipeline download --force`.")


def architecture_of(config: dict[str, Any]) -> Optional[str]:
    architectures = config.get("architectures") or []
    return architectures[0] if architectures else causal_lm_class(config.get("model_type"))


def check_architecture(config: dict[str, Any], hf_dir: Path) -> str:
    arch = architecture_of(config)
    if arch in NOT_EXPORTABLE:
        raise UnsupportedError(
            f"Architecture {arch} of {hf_dir} cannot be converted here: {NOT_EXPORTABLE[arch]}.",
            hint=f"Supported: {', '.join(SUPPORTED_ARCHITECTURES)}.",
        )
    if arch not in SUPPORTED_ARCHITECTURES:
        shown = arch or f"(none; model_type {config.get('model_type')!r})"
        raise UnsupportedError(
            f"Architecture {shown} of {hf_dir} is not supported by ModelOpt's TensorRT-LLM export in this pipeline.",
            hint=f"Supported: {', '.join(SUPPORTED_ARCHITECTURES)}.",
        )
    return SUPPORTED_ARCHITECTURES[arch]


def check_parallel(config: dict[str, Any], tp: int, pp: int) -> None:
    heads = int(config.get("num_attention_heads") or 0)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    layers = int(config.get("num_hidden_layers") or 0)

    def divisors(n: int) -> str:
        return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)

    if heads and heads % tp:
        raise InvalidInputError(
            f"--tp {tp} does not divide the model's {heads} attention heads.",
            hint=f"Use a tp size that divides both {heads} attention heads and {kv_heads} KV heads: "
            f"{', '.join(str(d) for d in range(1, heads + 1) if heads % d == 0 and kv_heads % d == 0)}.",
        )
    if kv_heads and kv_heads % tp:
        raise InvalidInputError(
            f"--tp {tp} does not divide the model's {kv_heads} KV heads (grouped-query attention).",
            hint=f"Use a tp size that divides {kv_heads}: {divisors(kv_heads)}.",
        )
    if layers and pp > layers:
        raise InvalidInputError(
            f"--pp {pp} is more than the model's {layers} layers.", hint=f"Use --pp {layers} or less."
        )


def linear_in_features(config: dict[str, Any]) -> dict[str, int]:
    """In-features of one decoder layer's quantized linears, from the HF config (Llama-style names)."""
    from pipeline.planner import model_spec_from_dict

    shape = model_spec_from_dict(config, "model")
    hidden = shape.hidden_size
    return {
        "self_attn.q_proj": hidden, "self_attn.k_proj": hidden, "self_attn.v_proj": hidden,
        "self_attn.o_proj": shape.num_heads * shape.head_dim, "mlp.gate_proj": hidden, "mlp.up_proj": hidden,
        "mlp.down_proj": shape.intermediate_size,
    }

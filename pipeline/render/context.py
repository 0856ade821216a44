"""The values render's Jinja templates are filled with, for the TensorRT-engine layout: what the engine
was built to do (EngineFeatures: logits dtype, prefix caching, chunked context, refusing what it cannot
do), how many BLS instances serve it, and template_context, the one dict every config.pbtxt.j2 reads.
The stage that renders with them is pipeline.render."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.render.model_repo import Runtime
from pipeline.render.spec import BLS_MAX_DEFAULT_INSTANCES, RenderSpec
from pipeline.core.versions import TRTLLM_VERSION
from pipeline.reference_runtime.lora import TRITON_TYPES

LOGITS_DTYPES = {"fp32": "TYPE_FP32", "fp16": "TYPE_FP16", "bf16": "TYPE_BF16"}
# The engine's pretrained_config.logits_dtype (trtllm-build --logits_dtype; TensorRT-LLM's default is
# float32) -> our --logits-dtype name. The backend refuses logits requests when the declared Triton type
# differs from the engine's, so render takes it from the engine.
ENGINE_LOGITS_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


class EngineFeatures(BaseModel):
    """What the engine was built to do, as far as the rendered tensorrt_llm config depends on it."""

    model_config = ConfigDict(frozen=True)

    logits_dtype: Literal["fp32", "fp16", "bf16"]
    kv_cache_reuse: bool
    chunked_context: bool
    notes: list[str]
    # lora_weights' Triton type: the engine's dtype, which NVIDIA's runtime requires of the weights (TYPE_FP16 in
    # NVIDIA's configs, TYPE_BF16 for a bf16 engine: ../shared/reference/speculative_decoding_and_lora.md 4.6-4.7)
    lora_weights_type: str = "TYPE_FP16"


def engine_features(config: dict, runtime: Runtime, spec: RenderSpec) -> EngineFeatures:
    """Logits dtype, prefix caching and chunked context as the engine allows them; a request for what the
    engine cannot do is refused (InvalidInputError) rather than rendered and silently turned off at load."""
    notes: list[str] = []
    pretrained = config.get("pretrained_config") or {}
    engine_logits = str(pretrained.get("logits_dtype") or "float32")
    if runtime == "reference":
        logits = spec.logits_dtype or "fp32"
    else:
        logits = ENGINE_LOGITS_DTYPES.get(engine_logits)
        if logits is None:
            raise InvalidInputError(f"The engine's pretrained_config.logits_dtype {engine_logits!r} has no Triton type here.",
                                    hint=f"Rebuild with --logits_dtype float32 (known: {', '.join(ENGINE_LOGITS_DTYPES)}).")
        if spec.logits_dtype and spec.logits_dtype != logits:
            raise InvalidInputError(
                f"--logits-dtype {spec.logits_dtype} does not match the engine's logits_dtype {engine_logits}: the "
                "tensorrt_llm backend refuses every context/generation-logits request when the two differ.",
                hint=f"Drop --logits-dtype (render takes {logits} from the engine), or rebuild with "
                f"--logits_dtype {dict((v, k) for k, v in ENGINE_LOGITS_DTYPES.items())[spec.logits_dtype]}.")
    plugin = (config.get("build_config") or {}).get("plugin_config") or {}
    paged_context = bool(plugin.get("use_paged_context_fmha"))
    if runtime == "reference":
        reuse = bool(spec.enable_kv_cache_reuse)
        return EngineFeatures(logits_dtype=logits, kv_cache_reuse=reuse, chunked_context=spec.enable_chunked_context,
                              notes=notes, lora_weights_type=_lora_type(pretrained))
    kv_algo = ((pretrained.get("quantization") or {}).get("kv_cache_quant_algo") or "")
    why_not = None if paged_context else (
        f"the engine was built without paged context FMHA ({kv_algo} KV cache)" if kv_algo
        else "the engine was built without paged context FMHA")
    for option, asked in (("--enable-kv-cache-reuse", spec.enable_kv_cache_reuse),
                          ("--enable-chunked-context", spec.enable_chunked_context)):
        if asked and why_not:
            raise InvalidInputError(
                f"{option} needs paged context FMHA, and {why_not}: TensorRT-LLM's executor would turn it off "
                "without a word.",
                hint=f"Drop {option}, or rebuild with --use_paged_context_fmha enable (not possible with an INT8 KV "
                "cache, or an FP8 KV cache without FP8 context FMHA).")
    reuse = spec.enable_kv_cache_reuse if spec.enable_kv_cache_reuse is not None else why_not is None
    if why_not and spec.enable_kv_cache_reuse is None:
        notes.append(f"prefix caching (KV-cache reuse) is off: {why_not}")
    return EngineFeatures(logits_dtype=logits, kv_cache_reuse=reuse, chunked_context=spec.enable_chunked_context,
                          notes=notes, lora_weights_type=_lora_type(pretrained))


def _lora_type(pretrained: dict) -> str:
    return TRITON_TYPES.get(str(pretrained.get("dtype") or "float16"), "TYPE_FP16")


def bls_instances(spec: RenderSpec, max_batch_size: int) -> tuple[int, int]:
    """(BLS instances, requests each instance serves at once). Each instance may take max_batch_size
    requests: its execute returns at once, so Triton may hand any one instance most of the requests, and
    a smaller per-instance cap would queue them inside it while others sit idle."""
    return spec.bls_instances or min(max_batch_size, BLS_MAX_DEFAULT_INSTANCES), max_batch_size


def template_context(spec: RenderSpec, runtime: Runtime, engine: Path, tokenizer: Path, build_config: dict,
                     features: EngineFeatures) -> dict:
    max_batch_size = int(build_config["max_batch_size"])
    bls_count, bls_concurrency = bls_instances(spec, max_batch_size)
    reuse = features.kv_cache_reuse
    parameters = {
        "max_beam_width": str(int(build_config.get("max_beam_width", 1))),
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": spec.batching_strategy,
        "gpt_model_path": str(engine),
        "batch_scheduler_policy": spec.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": f"{spec.kv_cache_free_gpu_mem_fraction:g}",
        "kv_cache_host_memory_bytes": "0",
        "kv_cache_onboard_blocks": "true",
        "exclude_input_in_output": _bool(spec.exclude_input_in_output),
        "enable_kv_cache_reuse": _bool(reuse),
        "enable_chunked_context": _bool(features.chunked_context),
        "normalize_log_probs": "true",
        "cancellation_check_period_ms": "100",
        "stats_check_period_ms": "100",
        "iter_stats_max_iterations": "1000",
        "request_stats_max_iterations": "0",
        "num_nodes": "1",
        "gpu_weights_percent": "1.0",
        "enable_context_fmha_fp32_acc": "false",
        "multi_block_mode": "true",
        "cuda_graph_mode": "false",
        "cuda_graph_cache_size": "0",
        "speculative_decoding_fast_logits": "false",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "tokenizer_dir": str(tokenizer),
        # Read by the C++ backend without a default (shared/reference/triton_trtllm_required_parameters.tsv):
        # empty means guided decoding off.
        "guided_decoding_backend": "",
        "xgrammar_tokenizer_info_path": "",
    }
    if spec.max_tokens_in_paged_kv_cache:
        parameters["max_tokens_in_paged_kv_cache"] = str(spec.max_tokens_in_paged_kv_cache)
    return {
        "runtime": runtime,
        "trtllm_version": TRTLLM_VERSION,
        "triton_backend": "python" if runtime == "reference" else "tensorrtllm",
        "triton_max_batch_size": max_batch_size,
        "decoupled_mode": _bool(spec.decoupled),
        "max_queue_delay_microseconds": spec.max_queue_delay_us,
        "max_queue_size": spec.max_queue_size,
        "queue_timeout_microseconds": spec.queue_timeout_us,
        "logits_datatype": LOGITS_DTYPES[features.logits_dtype],
        "lora_weights_data_type": features.lora_weights_type,
        "encoder_input_features_data_type": "TYPE_FP16",
        "prompt_embedding_table_data_type": "TYPE_FP16",
        "tokenizer_dir": str(tokenizer),
        "max_input_len": int(build_config.get("max_input_len") or 0),
        "add_special_tokens": "true",
        "skip_special_tokens": "true",
        "preprocessing_instance_count": spec.instances,
        "postprocessing_instance_count": spec.instances,
        "bls_instance_count": bls_count,
        "bls_concurrency": bls_concurrency,
        "accumulate_tokens": "false",
        "tensorrt_llm_parameters": parameters,
    }


def _bool(value: bool) -> str:
    return "true" if value else "false"

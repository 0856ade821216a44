"""The tensorrt_llm model's `parameters` as the reference runtime reads them: what it honours, what it
ignores and why. The Triton model logs the result once at load (into the server log), so a setting
never changes nothing without a word. limits_from_llm_options does the same for the LLM-API model's
model.yaml (the `tensorrt_llm.LLM` options).

Read as the C++ backend reads them (tensorrtllm_backend @c2e65b88, model_instance_state.cc; the
defaults in ../shared/reference/triton_trtllm_parameters.tsv): an unset or empty value (or NVIDIA's
unfilled `${...}` placeholder) takes the backend's default.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping

from pipeline.reference_runtime.kv_cache import Batching, SchedulerPolicy
from pipeline.reference_runtime.requests import EngineLimits

_TRUE = {"true", "1", "t", "y", "yes"}
_FALSE = {"false", "0", "f", "n", "no"}
# gpt_model_type -> batching (utils / model_instance_state.cc: anything else throws "Invalid gpt_model_type")
_BATCHING: dict[str, Batching] = {"inflight_fused_batching": "inflight", "inflight_batching": "inflight",
                                  "v1": "static"}
# Settings of the GPU executor with nothing to act on here (CUDA, MPI, GPU memory): named in one log line.
_POLICIES: tuple[SchedulerPolicy, ...] = ("guaranteed_no_evict", "max_utilization")
GPU_ONLY = ("gpu_device_ids", "participant_ids", "num_nodes", "executor_worker_path", "gpu_weights_percent",
            "enable_context_fmha_fp32_acc", "multi_block_mode", "cuda_graph_mode", "cuda_graph_cache_size",
            "kv_cache_host_memory_bytes", "kv_cache_onboard_blocks", "speculative_decoding_fast_logits",
            "lora_cache_gpu_memory_fraction", "lora_cache_optimal_adapter_size", "lora_cache_max_adapter_size")


class SettingsError(ValueError):
    """A parameter value the C++ backend would refuse at load, too."""


def check_rendered_by(model_repository: str) -> None:
    """Refuse to load under a `pipeline` other than the one that rendered the repository: the reference model imports
    whatever pipeline the server's environment has, and its code must be the code the repository was rendered for.
    model_repository: the model's folder (Triton's args["model_repository"]); its repository's manifest.json (render's)
    records pipeline_version. A folder without that manifest was not rendered by `pipeline render`: not checked."""
    from pathlib import Path

    from pipeline import __version__ as installed

    manifest_path = Path(model_repository).parent / "manifest.json"
    if not manifest_path.is_file():
        return
    try:
        rendered = json.loads(manifest_path.read_text(encoding="utf-8")).get("pipeline_version")
    except (OSError, ValueError) as error:
        raise SettingsError(f"cannot read {manifest_path}: {error}") from None
    if rendered != installed:
        raise SettingsError(
            f"the repository was rendered by pipeline {rendered or '(a version that did not record itself)'}, and this "
            f"server imports pipeline {installed}: render it again with this pipeline (`pipeline render ...`), or serve it "
            f"where pipeline {rendered or 'of its render'} is installed")


@dataclass(frozen=True)
class RuntimeSettings:
    batching: Batching = "inflight"
    scheduler_policy: SchedulerPolicy = "guaranteed_no_evict"
    kv_cache_free_mem_fraction: float = 0.9
    max_tokens_in_paged_kv_cache: int | None = None
    enable_kv_cache_reuse: bool = False
    enable_chunked_context: bool = False
    exclude_input_in_output: bool = False
    cancellation_check_period_ms: int = 100
    stats_check_period_ms: int = 100
    honoured: tuple[str, ...] = ()  # one line per setting, for the load log
    ignored: tuple[str, ...] = field(default=())


def _value(parameters: Mapping[str, object], key: str) -> str | None:
    raw = parameters.get(key)
    if isinstance(raw, Mapping):  # Triton's model_config JSON: {"key": {"string_value": "..."}}
        raw = raw.get("string_value")
    if raw is None:
        return None
    text = str(raw).strip()
    return None if text == "" or text.startswith("${") else text


def _bool(parameters: Mapping[str, object], key: str, default: bool) -> bool:
    text = _value(parameters, key)
    if text is None:
        return default
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise SettingsError(f"Parameter {key}={text!r} is not a boolean (true/false).")


def _number(parameters: Mapping[str, object], key: str, cast, default):
    text = _value(parameters, key)
    if text is None:
        return default
    try:
        return cast(text)
    except ValueError:
        raise SettingsError(f"Parameter {key}={text!r} is not {'a whole number' if cast is int else 'a number'}.") from None


def _known_policy(text: str) -> SchedulerPolicy | None:
    """The scheduler policy `text` names, None when the runtime has no such policy (the default is used)."""
    return text if text in _POLICIES else None  # type: ignore[return-value]


def read_settings(parameters: Mapping[str, object]) -> RuntimeSettings:
    """The runtime's settings from the tensorrt_llm model's parameters (see the module docstring)."""
    honoured: list[str] = []
    ignored: list[str] = []

    model_type = _value(parameters, "gpt_model_type") or "inflight_fused_batching"
    batching = _BATCHING.get(model_type.lower())
    if batching is None:
        raise SettingsError(f"Invalid gpt_model_type {model_type!r}: use inflight_fused_batching, inflight_batching "
                            "or V1, as the C++ backend requires.")
    if batching == "static":
        honoured.append("gpt_model_type V1: static batching (a new batch starts when the whole previous one ended)")
    else:
        honoured.append(f"gpt_model_type {model_type}: in-flight batching (requests join and leave the running "
                        "batch at every step; each step is one forward pass over context and generation tokens, "
                        "so fused and unfused in-flight batching are the same here)")

    policy_text = _value(parameters, "batch_scheduler_policy") or "guaranteed_no_evict"
    policy = _known_policy(policy_text)
    if policy is None:  # the C++ backend logs a warning and keeps the default
        policy = "guaranteed_no_evict"
        ignored.append(f"batch_scheduler_policy {policy_text!r} is not max_utilization or guaranteed_no_evict: "
                       "guaranteed_no_evict is used, as the C++ backend does")
    honoured.append(f"batch_scheduler_policy {policy}" + (
        ": a request starts once the KV blocks for its prompt and every token it may generate are free"
        if policy == "guaranteed_no_evict" else
        ": a request starts when a batch slot is free; when the KV cache runs full the newest requests are "
        "paused (their blocks freed, recomputed later)"))

    fraction = _number(parameters, "kv_cache_free_gpu_mem_fraction", float, 0.9)
    if not 0 < fraction <= 1:
        raise SettingsError(f"kv_cache_free_gpu_mem_fraction must be in (0, 1], got {fraction:g}.")
    max_tokens = _number(parameters, "max_tokens_in_paged_kv_cache", int, None)
    if max_tokens is not None and max_tokens < 1:
        raise SettingsError(f"max_tokens_in_paged_kv_cache must be at least 1, got {max_tokens}.")

    chunked = _bool(parameters, "enable_chunked_context", False)
    if chunked:
        honoured.append("enable_chunked_context true: a prompt that does not fit a step's max_num_tokens is split "
                        "across steps")
    else:
        ignored.append("enable_chunked_context false: transformers' scheduler always splits a prompt that does not "
                       "fit the max_num_tokens left in a step (TensorRT-LLM without chunking runs each context "
                       "whole); the tokens are the same, only when a long prompt's context finishes differs")

    reuse = _bool(parameters, "enable_kv_cache_reuse", False)
    honoured.append(f"enable_kv_cache_reuse {str(reuse).lower()}"
                    + (": prompt prefixes share KV blocks" if reuse else ""))
    cancel_ms = _number(parameters, "cancellation_check_period_ms", int, 100)
    stats_ms = _number(parameters, "stats_check_period_ms", int, 100)
    honoured.append(f"cancellation_check_period_ms {cancel_ms}, stats_check_period_ms {stats_ms} (metrics)")

    gpu_only = [key for key in GPU_ONLY if _value(parameters, key) is not None]
    if gpu_only:
        ignored.append("GPU-only settings with nothing to act on in a CPU process: " + ", ".join(gpu_only))
    return RuntimeSettings(
        batching=batching, scheduler_policy=policy, kv_cache_free_mem_fraction=fraction,
        max_tokens_in_paged_kv_cache=max_tokens, enable_kv_cache_reuse=reuse, enable_chunked_context=chunked,
        exclude_input_in_output=_bool(parameters, "exclude_input_in_output", False),
        cancellation_check_period_ms=max(1, cancel_ms), stats_check_period_ms=max(1, stats_ms),
        honoured=tuple(honoured), ignored=tuple(ignored))


def limits_from_llm_options(options: Mapping[str, object], triton_config: Mapping[str, object]
                            ) -> tuple[EngineLimits, list[str], list[str]]:
    """EngineLimits from the LLM-API model's model.yaml: `options` (the tensorrt_llm.LLM keys, without
    triton_config) and its `triton_config`; and what is honoured / ignored, one line each (for the load log).
    An unset, 0 or empty option takes EngineLimits' default; max_seq_len defaults to the checkpoint's
    max_position_embeddings (2048 without one) and max_input_len to max_seq_len."""
    defaults = EngineLimits()
    kv = options.get("kv_cache_config") or {}
    scheduler = options.get("scheduler_config") or {}
    max_seq_len = options.get("max_seq_len")
    if max_seq_len is None:
        with open(os.path.join(str(options["model"]), "config.json"), encoding="utf-8") as handle:
            max_seq_len = int(json.load(handle).get("max_position_embeddings") or defaults.max_seq_len)
    policy_text = str(scheduler.get("capacity_scheduler_policy", "GUARANTEED_NO_EVICT")).lower()
    policy = _known_policy(policy_text)
    limits = {
        "max_batch_size": int(options.get("max_batch_size") or defaults.max_batch_size),
        "max_num_tokens": int(options.get("max_num_tokens") or defaults.max_num_tokens),
        "max_seq_len": int(max_seq_len),
        "max_input_len": int(options.get("max_input_len") or max_seq_len),
        "tokens_per_block": int(kv.get("tokens_per_block") or defaults.tokens_per_block),
        "kv_cache_free_mem_fraction": float(kv.get("free_gpu_memory_fraction") or defaults.kv_cache_free_mem_fraction),
        "max_tokens_in_paged_kv_cache": int(kv["max_tokens"]) if kv.get("max_tokens") else None,
        "enable_kv_cache_reuse": bool(kv.get("enable_block_reuse", False)),
        "scheduler_policy": policy or defaults.scheduler_policy,
        "cancellation_check_period_ms": int(triton_config.get("cancellation_check_period_ms")
                                            or defaults.cancellation_check_period_ms),
    }
    honoured = [f"{key}={value}" for key, value in limits.items()
                if key != "max_tokens_in_paged_kv_cache" or value is not None]
    mapped = {"model", "backend", "max_batch_size", "max_num_tokens", "max_seq_len", "max_input_len",
              "kv_cache_config", "scheduler_config"}
    ignored = [f"{key} (a GPU setting of TensorRT-LLM's PyTorch backend)" for key in sorted(options) if key not in mapped]
    ignored += [f"kv_cache_config.{key}" + (" (the reference runtime's KV cache is float32; a quantized KV cache is "
                                             "simulated from triton_config.simulated)" if key == "dtype" else "")
                for key in sorted(kv)
                if key not in ("tokens_per_block", "free_gpu_memory_fraction", "max_tokens", "enable_block_reuse")]
    if "capacity_scheduler_policy" in scheduler and policy is None:
        ignored.append(f"scheduler_config.capacity_scheduler_policy={policy_text} (guaranteed_no_evict used)")
    return EngineLimits(**limits), honoured, ignored

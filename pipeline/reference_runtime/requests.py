"""What the reference runtime takes and gives: the engine limits, a request, the events it answers with, its
counters, and the checks that refuse a request (RequestError: the message goes to the client)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from pipeline.reference_runtime.kv_cache import Batching, KvCachePlan, SchedulerPolicy, blocks_for
from pipeline.reference_runtime.sampling import SamplingOptions


class RequestError(ValueError):
    """A request the runtime refuses (too long, unsupported option); the message goes to the client."""


@dataclass(frozen=True)
class EngineLimits:
    max_batch_size: int = 8
    max_input_len: int = 1024
    max_seq_len: int = 2048
    max_num_tokens: int = 8192
    tokens_per_block: int = 32
    max_tokens_in_paged_kv_cache: int | None = None
    kv_cache_free_mem_fraction: float = 0.9
    enable_kv_cache_reuse: bool = False
    max_queue_size: int = 0  # requests waiting for a slot or KV blocks; 0: no limit
    scheduler_policy: SchedulerPolicy = "guaranteed_no_evict"
    batching: Batching = "inflight"
    cancellation_check_period_ms: int = 100
    max_draft_len: int = 0  # draft tokens a request may carry (build_config["speculative"]; 0: built without it)

    @classmethod
    def from_build_config(cls, build_config: dict, **overrides) -> "EngineLimits":
        plugin = build_config.get("plugin_config") or {}
        values = {
            "max_batch_size": int(build_config.get("max_batch_size", 8)),
            "max_input_len": int(build_config.get("max_input_len", 1024)),
            "max_seq_len": int(build_config.get("max_seq_len", 2048)),
            "max_num_tokens": int(build_config.get("max_num_tokens") or 8192),
            "tokens_per_block": int(plugin.get("tokens_per_block", 32)),
            "max_draft_len": int((build_config.get("speculative") or {}).get("max_draft_len") or 0),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class GenerationRequest:
    input_ids: list[int]
    max_new_tokens: int
    end_id: int | None = None
    stop_words: list[list[int]] = field(default_factory=list)
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    streaming: bool = False
    return_log_probs: bool = False
    draft_tokens: list[int] = field(default_factory=list)  # draft_input_ids: verified at its first step


@dataclass
class GenerationEvent:
    """One update of a request. `new_tokens` are the tokens since the previous event; `tokens` all of them."""

    new_tokens: list[int]
    tokens: list[int]
    logprobs: list[float]
    finished: bool
    finish_reason: str | None = None  # length | end_id | stop_word | cancelled | error
    error: str | None = None
    timings_ns: dict[str, int] = field(default_factory=dict)
    total_draft_tokens: int = 0  # speculative decoding: draft tokens proposed to the target so far
    total_accepted_draft_tokens: int = 0  # of those, the ones the target's own choice confirmed

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted, 0 when nothing was drafted (as TensorRT-LLM's LlmRequest::createResult:
        NVIDIA/TensorRT-LLM@119c6e60 cpp/tensorrt_llm/batch_manager/llmRequest.cpp)."""
        return self.total_accepted_draft_tokens / self.total_draft_tokens if self.total_draft_tokens else 0.0


Callback = Callable[[GenerationEvent], None]


@dataclass(frozen=True)
class RuntimeStats:
    """The runtime's own counters (the tensorrt_llm model reports them as nv_trt_llm_* metrics)."""

    active: int  # requests in the batching manager (batch slots in use)
    waiting: int  # requests queued for a slot or KV blocks
    max_active: int  # max_batch_size
    kv_blocks_max: int
    kv_blocks_used: int  # blocks the manager's cache has handed out
    kv_blocks_reserved: int  # worst-case blocks held for started requests (guaranteed_no_evict)
    tokens_per_block: int
    finished: int  # requests ended since load (any reason)

    @property
    def kv_blocks_free(self) -> int:
        return max(0, self.kv_blocks_max - self.kv_blocks_used)


def check_sampling(options: SamplingOptions, names: dict[str, str] | None = None) -> None:
    """Refuse what TensorRT-LLM's SamplingConfig refuses, naming the input: temperature < 0, top_p outside
    [0, 1], top_k < 0 (and min_tokens < 0, non-finite numbers). `names` maps a field to the name the
    client sent."""
    names = names or {}
    rules = (("temperature", options.temperature, lambda v: v >= 0, "must be >= 0 (0 is greedy)"),
             ("top_p", options.top_p, lambda v: 0 <= v <= 1, "must be between 0 and 1 (0 turns it off)"),
             ("top_k", options.top_k, lambda v: v >= 0, "must be >= 0 (0 turns it off)"),
             ("min_tokens", options.min_tokens, lambda v: v >= 0, "must be >= 0"))
    for field_name, value, ok, rule in rules:
        if not (math.isfinite(value) and ok(value)):
            raise RequestError(f"{names.get(field_name, field_name)} {rule}, got {value:g}.")


def check_request(request: GenerationRequest, limits: EngineLimits, plan: KvCachePlan | None) -> None:
    """Refuse a request the engine cannot serve: an empty or too long prompt, sampling TensorRT-LLM refuses, an
    output length below 1 or past max_seq_len, or more KV cache than the whole cache (`plan`; None: not checked)."""
    prompt = len(request.input_ids)
    if prompt == 0:
        raise RequestError("The prompt is empty (input_lengths is 0).")
    if prompt > limits.max_input_len:
        raise RequestError(
            f"Prompt has {prompt} tokens, more than this engine's max_input_len {limits.max_input_len}. "
            "Shorten the prompt or build the engine with a larger max_input_len."
        )
    check_sampling(request.sampling, names={"top_k": "top_k (runtime_top_k)", "top_p": "top_p (runtime_top_p)"})
    if len(request.draft_tokens) > limits.max_draft_len:
        # TensorRT-LLM's own words (LlmRequest::validate, NVIDIA/TensorRT-LLM@119c6e60
        # cpp/tensorrt_llm/batch_manager/llmRequest.cpp): an engine built without speculation has max_draft_len 0
        raise RequestError(
            f"Draft tokens length ({len(request.draft_tokens)}) exceeds maximum draft tokens length "
            f"({limits.max_draft_len}). Send at most {limits.max_draft_len} draft_input_ids"
            + ("" if limits.max_draft_len else ", or build the engine with --speculative draft-target") + ".")
    if request.max_new_tokens < 1:
        raise RequestError(f"request_output_len must be at least 1, got {request.max_new_tokens}.")
    if prompt + request.max_new_tokens > limits.max_seq_len:
        raise RequestError(
            f"Prompt ({prompt} tokens) + request_output_len ({request.max_new_tokens}) = "
            f"{prompt + request.max_new_tokens} exceeds this engine's max_seq_len {limits.max_seq_len}. "
            "Ask for fewer output tokens or build the engine with a larger max_seq_len."
        )
    if plan is not None and blocks_for(prompt + request.max_new_tokens, plan.tokens_per_block) > plan.blocks:
        raise RequestError(
            f"Prompt ({prompt} tokens) + request_output_len ({request.max_new_tokens}) needs "
            f"{blocks_for(prompt + request.max_new_tokens, plan.tokens_per_block) * plan.tokens_per_block} tokens "
            f"of KV cache, more than this runtime's whole cache ({plan.tokens} tokens, from {plan.source}). "
            "Ask for fewer tokens, or raise max_tokens_in_paged_kv_cache / kv_cache_free_gpu_mem_fraction."
        )

"""`pipeline build --backend pytorch --attention-dp`: an MoE deployable with attention data parallelism and the experts
spread over the same GPUs (NVIDIA's "DEP"). Each of the tp GPUs runs the whole attention for its own requests, with its
own KV cache and batch, and holds 1/tp of the routed experts; the limits and the memory check are one GPU's (planner
Scenario.attention_dp, through build.memory.EngineTarget). Options: enable_attention_dp true and moe_expert_parallel_size
= tp (1.1.0's BaseLlmArgs keys, pipeline/data/trtllm_llm_args.tsv)."""

from __future__ import annotations

from typing import Any

from pipeline.build.llm_args import check_options
from pipeline.core.errors import UnsupportedError
from pipeline.planner.shapes import ModelSpec, check_attention_dp, check_tp


def check_split(spec: Any, model: ModelSpec, tp: int) -> None:
    """The deployable's split over its tp GPUs: attention heads by TP, or with --attention-dp an MoE whose experts the
    GPUs share evenly, without what DEP is not planned with."""
    if not spec.attention_dp:
        check_tp(model, tp)
        return
    check_attention_dp(model, tp)
    for given, name in ((spec.lora, "--lora"), (spec.speculative, "--speculative")):
        if given:
            raise UnsupportedError(f"{name} is not planned with --attention-dp.", hint=f"Drop {name} or --attention-dp.")


def with_attention_dp(options: dict[str, Any], why: dict[str, str], tp: int | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The options with attention data parallelism and the experts over the tp GPUs, and why (tp None: as they are),
    checked against 1.1.0's option keys."""
    if tp is None:
        return options, why
    options = {**options, "enable_attention_dp": True, "moe_expert_parallel_size": tp}
    check_options(options)
    return (options,
            {**why, "enable_attention_dp": "attention data parallelism: each GPU runs the whole attention for its own requests, "
             "with its own KV cache and batch (max_batch_size and max_num_tokens are each GPU's)",
             "moe_expert_parallel_size": f"the routed experts spread whole over the {tp} GPUs (expert TP 1)"})

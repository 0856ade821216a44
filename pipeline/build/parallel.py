"""How a `pipeline build --backend pytorch` deployable splits over its GPUs: tensor parallelism (--tp), attention data
parallelism with the experts over the same GPUs (--attention-dp, NVIDIA's "DEP"), and pipeline stages (--pp).

- DEP: each of the tp GPUs runs the whole attention for its own requests, with its own KV cache and batch, and holds 1/tp
  of the routed experts; the limits and the memory check are one GPU's (planner Scenario.attention_dp, through
  build.memory.EngineTarget). Options: enable_attention_dp true and moe_expert_parallel_size = tp.
- Pipeline stages: each of the pp stages (of tp GPUs each) holds its share of the layers; max_batch_size and
  max_num_tokens are one micro-batch's, with pp micro-batches in flight, and the memory check is the fullest stage's GPU's
  (planner/stages.py). Option: pipeline_parallel_size = pp, which trtllm-serve (--pp_size) and the Triton LLM-API model
  read from the options. TensorRT-LLM's pipeline executor runs no draft model, so --speculative is refused with it.
The option keys are 1.1.0's BaseLlmArgs fields (pipeline/data/trtllm_llm_args.tsv)."""

from __future__ import annotations

from typing import Any

from pipeline.build.llm_args import check_options
from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import GpuSpec, check_one_cpu_process
from pipeline.planner.shapes import ModelSpec, check_attention_dp, check_tp
from pipeline.planner.stages import check_pp


def check_split(spec: Any, model: ModelSpec, gpu: GpuSpec) -> tuple[int, int]:
    """(tp, pp) of the deployable, refusing a split the model or the device cannot take: attention heads by TP, or with
    --attention-dp an MoE whose experts the GPUs share evenly; a layer for every stage; one process on the CPU; and
    without what DEP or pipeline stages are not planned with."""
    tp, pp = spec.tp or 1, spec.pp or 1
    if gpu.is_cpu:
        check_one_cpu_process(tp, pp)
    check_pp(model, pp)
    if pp > 1 and spec.speculative:
        raise UnsupportedError("--speculative is not planned with --pp: TensorRT-LLM's pipeline executor runs no draft model.",
                               hint="Drop --speculative or --pp (tensor parallelism, --tp N, takes speculation).")
    if not spec.attention_dp:
        check_tp(model, tp)
        return tp, pp
    check_attention_dp(model, tp)
    for given, name in ((spec.lora, "--lora"), (spec.speculative, "--speculative")):
        if given:
            raise UnsupportedError(f"{name} is not planned with --attention-dp.", hint=f"Drop {name} or --attention-dp.")
    return tp, pp


def with_split(options: dict[str, Any], why: dict[str, str], *, tp: int, pp: int,
               attention_dp: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The options with attention data parallelism (and the experts over the tp GPUs) and pipeline stages where the build
    asks for them, and why, checked against 1.1.0's option keys."""
    if attention_dp:
        options = {**options, "enable_attention_dp": True, "moe_expert_parallel_size": tp}
        why = {**why, "enable_attention_dp": "attention data parallelism: each GPU runs the whole attention for its own "
               "requests, with its own KV cache and batch (max_batch_size and max_num_tokens are each GPU's)",
               "moe_expert_parallel_size": f"the routed experts spread whole over the {tp} GPUs (expert TP 1)"}
    if pp > 1:
        options = {**options, "pipeline_parallel_size": pp}
        why = {**why, "pipeline_parallel_size": f"{pp} pipeline stages of {tp} GPU(s), each holding its share of the layers; "
               f"max_batch_size and max_num_tokens are one micro-batch's, {pp} in flight"}
    check_options(options)
    return options, why

"""What `pipeline render` is asked for: the frozen RenderSpec (every operator choice that decides a rendered
repository) and the five models of the TensorRT-engine layout. The stage is pipeline.render; the template
values it derives from a spec are pipeline.render.context, the checks of what it wrote pipeline.render.checks."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.render.model_repo import Runtime

MODELS = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
# Python-backend stubs per BLS model: each instance is a process (memory, /dev/shm, start-up time), and a
# decoupled BLS instance serves several requests at once on its own threads, so a throughput engine with
# max_batch_size 1536 needs a handful of instances, not 1536.
BLS_MAX_DEFAULT_INSTANCES = 4


class RenderSpec(BaseModel):
    """Everything that decides a rendered repository. Frozen, validated once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Path = Field(description="engine folder (trtllm-build output or reference runtime folder)")
    tokenizer: Path | None = Field(None, description="tokenizer folder (default: <engine>/tokenizer)")
    model_root: Path | None = Field(None, description="absolute path of the bundle where it is served (default: out)")
    runtime: Runtime | None = Field(None, description="default: the engine's config.json 'runtime', else tensorrtllm; for a "
                                    "PyTorch-backend deployable: reference when built with --gpu cpu, else llmapi")
    out: Path | None = Field(None, description="default: build/<model>/triton/<profile-id>/")
    decoupled: bool = True
    batching_strategy: Literal["inflight_fused_batching", "inflight_batching", "V1"] = "inflight_fused_batching"
    batch_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] = "guaranteed_no_evict"
    kv_cache_free_gpu_mem_fraction: float | None = Field(
        None, gt=0, le=1, description="default: the SLO plan's (`pipeline build --slo`, pipeline/render/slo.py), else 0.9")
    max_tokens_in_paged_kv_cache: int | None = Field(None, ge=1)
    enable_kv_cache_reuse: bool | None = Field(
        None, description="default: what the engine can do (tensorrtllm engines built with paged context FMHA); "
        "false for reference")
    enable_chunked_context: bool = False
    exclude_input_in_output: bool = False
    max_queue_delay_us: int = Field(0, ge=0)
    max_queue_size: int = Field(0, ge=0, description="0: unlimited")
    queue_timeout_us: int = Field(0, ge=0, description="0: requests wait in the queue without a deadline")
    instances: int = Field(1, ge=1, description="preprocessing and postprocessing instances")
    bls_instances: int | None = Field(None, ge=1, description=f"default: min(max_batch_size, {BLS_MAX_DEFAULT_INSTANCES})")
    logits_dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        None, description="default: the engine's logits dtype; any other value is refused (the backend rejects a mismatch)")
    force: bool = False

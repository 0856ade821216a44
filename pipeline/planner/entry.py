"""`pipeline plan`: memory, build limits and predicted latency/throughput for one Scenario, and what
fits instead when it does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline.planner.memory import GIB, Alternative, MemoryPlan, alternatives, memory_plan, weight_bytes
from pipeline.planner.rates import EFFICIENCY
from pipeline.planner.recommend import recommend
from pipeline.planner.scenario import Goal, Scenario
from pipeline.planner.speculation import SpeculationModel, SpeculationPlan, speculation_plan
from pipeline.planner.timing import Prediction, ThroughputEstimate, kv_fraction, max_throughput, predict


class SpeculationInput(BaseModel):
    """`--speculative-acceptance`: predict speculative decoding from an acceptance rate (bench --speculative
    measures one on your own prompts); a draft model's config adds its decode steps (draft-target)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    acceptance: float = Field(ge=0, le=1)
    max_draft_len: int = Field(4, ge=1)
    draft_model: Path | None = None
    tpot_slo_ms: float | None = Field(None, gt=0)


class PlanSpec(BaseModel):
    """Everything `pipeline plan` needs, validated once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Path = Field(description="HF model folder or its config.json")
    gpu: str
    quant: str = "fp16"
    kv_cache: str | None = None
    tp: int = Field(1, ge=1)
    isl: int = Field(1024, ge=1)
    osl: int = Field(128, ge=1)
    concurrency: int = Field(1, ge=1)
    goal: Goal = "throughput"
    kv_cache_free_gpu_mem_fraction: float | None = Field(None, gt=0, le=1)
    speculation: SpeculationInput | None = None


class PlanResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: dict[str, Any]
    gpu: str
    quant: str
    kv_cache: str
    tp: int
    isl: int
    osl: int
    goal: Goal
    memory: MemoryPlan
    fits: bool
    alternatives: list[Alternative]
    build: dict[str, Any]
    prediction: Prediction | None
    max_throughput: ThroughputEstimate | None
    constants: dict[str, float | str | None]
    speculation: SpeculationPlan | None = None


def plan(spec: PlanSpec) -> PlanResult:
    """Memory, build limits and predicted latency/throughput for one model/GPU/precision/TP."""
    scenario = Scenario(spec.model, spec.gpu, spec.quant, spec.kv_cache, spec.tp, spec.isl, spec.osl).check()
    model, quant = scenario.model, scenario.quant
    build = recommend(scenario, spec.goal)
    if spec.kv_cache_free_gpu_mem_fraction is not None:
        build = {**build, "kv_cache_free_gpu_mem_fraction": spec.kv_cache_free_gpu_mem_fraction}
    memory = memory_plan(
        scenario, max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
        kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    options = [] if memory.fits else alternatives(scenario)
    prediction = throughput = None
    if memory.fits:
        prediction = predict(scenario, spec.concurrency, build=build)
        throughput = max_throughput(scenario, build=build)
    speculation = None
    if memory.fits and spec.speculation is not None:
        wanted = spec.speculation
        draft = None if wanted.draft_model is None else Scenario(
            wanted.draft_model, spec.gpu, spec.quant, spec.kv_cache, spec.tp, spec.isl, spec.osl).check()
        speculation = speculation_plan(scenario, SpeculationModel(wanted.acceptance, wanted.max_draft_len, draft),
                                       spec.concurrency, build["max_batch_size"], wanted.tpot_slo_ms)
    return PlanResult(
        model={
            "name": model.name, "params_b": round(model.param_count / 1e9, 3), "layers": model.num_layers,
            "hidden": model.hidden_size, "heads": model.num_heads, "kv_heads": model.num_kv_heads,
            "head_dim": model.head_dim, "vocab": model.vocab_size, "tied_embeddings": model.tie_word_embeddings,
            "weights_gib_total": round(weight_bytes(model, quant) / GIB, 3),
        },
        gpu=scenario.gpu.key, quant=quant.name, kv_cache=scenario.kv.name, tp=spec.tp, isl=spec.isl, osl=spec.osl, goal=spec.goal,
        memory=memory, fits=memory.fits, alternatives=options, build=build,
        prediction=prediction, max_throughput=throughput, speculation=speculation,
        # the KV-read fraction this scenario gets (silicon's figure for its per-rank attention shape, for engines)
        constants={**EFFICIENCY.as_dict(), "kv_bandwidth_efficiency": round(kv_fraction(scenario, EFFICIENCY), 3)},
    )


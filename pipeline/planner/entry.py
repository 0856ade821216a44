"""`pipeline plan`: memory, build limits and predicted latency/throughput for one Scenario, and what
fits instead when it does not."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.core.deployable import HF_KV_CACHE_FORMATS, HF_QUANT_FORMATS
from pipeline.core.errors import UnsupportedError
from pipeline.planner.cpu import cpu_limits, plan_target
from pipeline.planner.memory import GIB, Alternative, MemoryPlan, alternatives, memory_plan, sixteen_bit_params, weight_bytes
from pipeline.planner.caveats import accuracy_caveats, bound_caveats, gpu_caveats, layout_caveats, pp_caveats, tpot_caveats
from pipeline.planner.published import TRTLLM_BENCH_KV_FRACTION, trtllm_bench_limits
from pipeline.planner.moe_timing import MoeTiming, moe_key, moe_timing_for
from pipeline.planner.rates import Efficiency
from pipeline.planner.recommend import recommend
from pipeline.planner.scenario import Goal, Scenario, stored_precision
from pipeline.planner.shapes import ModelSpec, check_attention_dp_backend, model_spec_from_config
from pipeline.planner.slo import backend_efficiency, backend_limits, backend_refusal, engine_flow_refusal
from pipeline.planner.speculation import SpeculationModel, SpeculationPlan, speculation_plan
from pipeline.planner.step import kv_fraction
from pipeline.planner.timing import Prediction, ThroughputEstimate, max_throughput, predict


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
    quant: str | None = None  # None: what the checkpoint declares it stores, else fp16 (scenario.stored_precision)
    kv_cache: str | None = None  # None: the KV-cache precision the checkpoint was calibrated for, else 16-bit
    tp: int = Field(1, ge=1)
    isl: int = Field(1024, ge=1)
    osl: int = Field(128, ge=1)
    concurrency: int = Field(1, ge=1)
    goal: Goal = "throughput"
    kv_cache_free_gpu_mem_fraction: float | None = Field(None, gt=0, le=1)
    speculation: SpeculationInput | None = None
    backend: Literal["tensorrt", "pytorch"] = "tensorrt"
    trtllm_bench_requests: int | None = Field(None, ge=1)  # also predict `trtllm-bench throughput` on a dataset this size
    attention_dp: bool = False  # the PyTorch backend's attention data parallelism, experts over the tp GPUs (Scenario)
    pp: int = Field(1, ge=1)  # pipeline stages, each of tp GPUs (planner/stages.py)


class TrtllmBenchPrediction(BaseModel):
    """What `trtllm-bench throughput` should report for a dataset of `requests` requests of this ISL/OSL, run with
    trtllm-bench's own limits (the prediction checked against NVIDIA's published figures: make plan-check)."""

    model_config = ConfigDict(frozen=True)

    requests: int
    kv_cache_free_gpu_mem_fraction: float
    max_batch_size: int
    max_num_tokens: int
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    batch: int  # the most requests in flight at once (the run fills up to it and drains from it)
    bound: str  # what dominates its mean iteration


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
    backend: str
    memory: MemoryPlan  # one GPU's (with attention_dp, the sequences it holds are its own requests')
    fits: bool
    alternatives: list[Alternative]
    build: dict[str, Any]
    prediction: Prediction | None
    max_throughput: ThroughputEstimate | None
    constants: dict[str, float | str | None]
    speculation: SpeculationPlan | None = None
    trtllm_bench: TrtllmBenchPrediction | None = None
    caveats: list[str] = []  # how far the published rows say to trust this prediction (MoE models, GPUs no fit saw)
    attention_dp: bool = False
    pp: int = 1  # pipeline stages: memory is the fullest stage's GPU's, limits one micro-batch's
    nodes: int = 1  # nodes (of the GPU's gpus_per_node) the tp x pp GPUs span; beyond one, `pipeline k8s` renders a LeaderWorkerSet


def plan(spec: PlanSpec) -> PlanResult:
    """Memory, build limits and predicted latency/throughput for one model/GPU/precision/TP on one backend (the CPU:
    the reference runtime, with this host's measured figures)."""
    model = model_spec_from_config(spec.model)
    kv_cache = spec.kv_cache or model.checkpoint_kv_cache
    if spec.attention_dp:
        check_attention_dp_backend(spec.backend)
    if spec.attention_dp and spec.speculation is not None:
        raise UnsupportedError("Speculative decoding is not planned with attention data parallelism.",
                               hint="Drop --speculative-acceptance or --attention-dp.")
    if spec.pp > 1 and spec.speculation is not None:  # TensorRT-LLM's pipeline-parallel executor loop refuses a drafter
        raise UnsupportedError("Speculative decoding is not planned with pipeline parallelism: TensorRT-LLM's pipeline "
                               "executor runs no draft model.", hint="Drop --speculative-acceptance or --pp.")
    scenario = Scenario(model, plan_target(spec.gpu), stored_precision(model, spec.quant), kv_cache, spec.tp, spec.isl,
                        spec.osl, attention_dp=spec.attention_dp, pp=spec.pp).check()
    quant = scenario.quant
    no_engine = engine_flow_refusal(model, spec.backend, scenario.gpu)
    if no_engine:
        raise UnsupportedError(no_engine + ".", hint="Plan it for TensorRT-LLM's PyTorch backend, which runs it from its HF "
                               "checkpoint: --backend pytorch.")
    refusal = backend_refusal(spec.backend, scenario.gpu, quant.name, scenario.kv.name)
    if refusal:
        raise UnsupportedError(refusal + ".", hint=f"With --backend pytorch use --quant {'|'.join(HF_QUANT_FORMATS)} and "
                               f"--kv-cache {'|'.join(HF_KV_CACHE_FORMATS)} (what the support matrix allows on "
                               f"{scenario.gpu.key}), or plan an engine (--backend tensorrt).")
    eff = backend_efficiency(scenario, spec.backend)
    build = backend_limits(recommend(scenario, spec.goal), spec.backend)
    if scenario.gpu.is_cpu:
        build = cpu_limits(build, spec.goal, spec.isl)
    if spec.kv_cache_free_gpu_mem_fraction is not None:
        build = {**build, "kv_cache_free_gpu_mem_fraction": spec.kv_cache_free_gpu_mem_fraction}
    memory = memory_plan(
        scenario, max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
        kv_fraction=build["kv_cache_free_gpu_mem_fraction"],
    )
    options = [] if memory.fits else [alt for alt in alternatives(scenario)  # only what this backend deploys
                                      if not backend_refusal(spec.backend, scenario.gpu, alt.quant, alt.kv_cache)]
    prediction = throughput = None
    if memory.fits:
        prediction = predict(scenario, spec.concurrency, build=build, efficiency=eff)
        throughput = max_throughput(scenario, build=build, efficiency=eff)
    bench = _trtllm_bench(scenario, spec, eff) if memory.fits and spec.trtllm_bench_requests else None
    speculation = None
    if memory.fits and spec.speculation is not None:
        wanted = spec.speculation
        draft = None if wanted.draft_model is None else Scenario(
            wanted.draft_model, scenario.gpu, quant, kv_cache, spec.tp, spec.isl, spec.osl).check()
        speculation = speculation_plan(scenario, SpeculationModel(wanted.acceptance, wanted.max_draft_len, draft),
                                       spec.concurrency, build["max_batch_size"], wanted.tpot_slo_ms)
    # an MoE's routed experts: timed on silicon for this GPU, carried over from another GPU's timing, or neither
    experts = (moe_timing_for(moe_key(scenario.gpu, quant, model, spec.tp, expert_parallel=spec.attention_dp))
               if eff.moe_measured else None)
    return PlanResult(
        model={
            "name": model.name, "params_b": round(model.param_count / 1e9, 3), "layers": model.num_layers,
            "hidden": model.hidden_size, "heads": model.num_heads, "kv_heads": model.num_kv_heads,
            "head_dim": model.head_dim, "vocab": model.vocab_size, "tied_embeddings": model.tie_word_embeddings,
            # multi-head latent attention: what its cache holds per token and layer (None: grouped-query attention)
            "latent_attention": {"kv_lora_rank": model.latent_attention.kv_lora_rank,
                                 "qk_rope_head_dim": model.latent_attention.qk_rope_head_dim} if model.latent_attention else None,
            "weights_gib_total": round(weight_bytes(model, quant) / GIB, 3),
            # layers that attend to their last N tokens, or their own N-token chunk, only: {N: layers} (the PyTorch backend
            # runs them so; engines do not)
            "sliding_windows": {str(w): model.sliding_windows.count(w) for w in sorted(set(model.sliding_windows) - {0})},
            "attention_chunks": {str(c): model.attention_chunks.count(c) for c in sorted(set(model.attention_chunks) - {0})},
            # how the checkpoint says it is stored (None: it declares nothing: 16-bit weights)
            "checkpoint_quant": model.checkpoint_quant, "expert_weights": model.expert_weights,
            # linear weights it leaves unquantized (its exclude_modules), in billions: planned in 16-bit
            "sixteen_bit_params_b": round(sixteen_bit_params(model, quant) / 1e9, 3),
            # how an MoE's routed experts are timed (None: a dense model)
            "experts_timing": _experts_timing(model, eff, experts),
        },
        gpu=scenario.gpu.key, quant=quant.name, kv_cache=scenario.kv.name, tp=spec.tp, isl=spec.isl, osl=spec.osl, goal=spec.goal,
        backend=spec.backend, attention_dp=spec.attention_dp, pp=spec.pp, nodes=math.ceil(scenario.gpus / scenario.gpu.gpus_per_node),
        memory=memory, fits=memory.fits, alternatives=options, build=build,
        prediction=prediction, max_throughput=throughput, speculation=speculation, trtllm_bench=bench,
        # the KV-read fraction this scenario gets (silicon's figure for its per-rank attention shape, for engines)
        constants={**eff.as_dict(), "kv_bandwidth_efficiency": round(kv_fraction(scenario, eff), 3)},
        caveats=[] if scenario.gpu.is_cpu else accuracy_caveats(
            model, spec.backend, eff, attention_dp=spec.attention_dp,
            moe_measured=experts is not None,
            moe_carried=(scenario.gpu.key, experts.donor) if experts and experts.donor else None)
        + layout_caveats(model, spec.tp, spec.attention_dp)
        + gpu_caveats(scenario.gpu.key, spec.backend, moe=bool(model.moe_layer_count))
        + bound_caveats(spec.backend, throughput.bound if throughput else None) + pp_caveats(spec.pp, spec.backend)
        + (tpot_caveats(spec.backend, {scenario.gpu.key}) if prediction else []),
    )


def _experts_timing(model: ModelSpec, eff: Efficiency, experts: MoeTiming | None) -> str | None:
    """How the plan times an MoE's routed experts: measured on silicon for this GPU, carried over from another GPU's
    measurement, or as a share of the dense GEMM rate (the engines' fitted share; the PyTorch backend's fallback)."""
    if not model.moe_layer_count:
        return None
    if experts is not None:
        return f"carried over from {experts.donor}'s silicon timing" if experts.donor else "measured on silicon for this GPU"
    return f"{eff.moe_expert_compute} of the dense GEMM rate"


def _trtllm_bench(scenario: Scenario, spec: PlanSpec, eff: Efficiency) -> TrtllmBenchPrediction:
    """`trtllm-bench throughput` on this GPU: its own limits at the asked KV fraction (else its default), the dataset
    replayed as the scheduler serves it (planner/offline.py)."""
    if scenario.gpu.is_cpu:
        raise UnsupportedError("trtllm-bench runs on a GPU, not on the CPU's reference runtime.",
                               hint="Measure the reference runtime with `pipeline bench`, or plan a GPU (--gpu h100).")
    fraction = spec.kv_cache_free_gpu_mem_fraction or TRTLLM_BENCH_KV_FRACTION
    requests = spec.trtllm_bench_requests or 1  # called only when it is set
    limits = trtllm_bench_limits(scenario, spec.backend, fraction)
    estimate = max_throughput(scenario, build=limits, efficiency=eff, requests=requests)
    return TrtllmBenchPrediction(
        requests=requests, kv_cache_free_gpu_mem_fraction=fraction, max_batch_size=limits["max_batch_size"],
        max_num_tokens=limits["max_num_tokens"], output_tokens_per_s=estimate.output_tokens_per_s,
        output_tokens_per_s_per_gpu=round(estimate.output_tokens_per_s / scenario.gpus, 2), batch=estimate.batch,
        bound=estimate.bound,
    )

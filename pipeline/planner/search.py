"""`pipeline plan --slo`: search GPU x precision x KV-cache precision x TP (and attention DP) x PP x max_batch_size x max_num_tokens
for the builds that meet TTFT/TPOT SLOs, with the planner's own model (planner/slo.py for p50/p99).

Per build it finds the highest concurrency whose predicted latencies meet every bound (at most the batch
the build keeps in flight: clients beyond it only queue), then the tokens/s per GPU and per user there,
the replicas a request rate needs, the cost from the price table, and the accuracy cost of the precision
where `pipeline evaluate` measured it. A calibration (planner/calibrate.py) scales the predictions of its
GPU and backend and gives them an interval.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.gpus import get_gpu
from pipeline.planner.accuracy import accuracy_costs
from pipeline.planner.calibrate import Calibration
from pipeline.planner.cpu import plan_target
from pipeline.planner.memory import memory_plan
from pipeline.planner.prices import Price
from pipeline.planner.caveats import accuracy_caveats, gpu_caveats, pp_caveats, slo_caveats
from pipeline.planner.rates import Efficiency, efficiency_for
from pipeline.planner.recommend import recommend
from pipeline.planner.scenario import Scenario, stored_precision
from pipeline.planner.shapes import ModelSpec, check_attention_dp_backend, model_spec_from_config
from pipeline.planner.slo import (Latency, SloTarget, backend_efficiency, backend_limits, backend_refusal, engine_flow_refusal,
                                  latency, meets, shortfall)

Backend = Literal["tensorrt", "pytorch"]
DEFAULT_GPUS = ("h100-sxm", "h200", "l40s", "a100-80gb")
DEFAULT_QUANTS = ("fp8", "int4_awq", "fp16")
DEFAULT_TPS = (1, 2, 4)
TOKEN_BUDGETS = (2048, 8192)  # max_num_tokens tried beside the throughput recommendation's
MAX_BATCH = 4096


class SearchSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: Path
    slo: SloTarget
    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    rate: float | None = None  # requests/s to serve (replicas)
    gpus: tuple[str, ...] = DEFAULT_GPUS
    quants: tuple[str, ...] | None = None  # None: the checkpoint's own precision where it declares one, else DEFAULT_QUANTS
    kv_caches: tuple[str, ...] | None = None  # None: the 16-bit cache, and FP8 where the GPU runs it
    tps: tuple[int, ...] = DEFAULT_TPS
    pps: tuple[int, ...] = (1,)  # pipeline stages (planner/stages.py), each of tp GPUs
    backend: Backend = "tensorrt"
    batch_sizes: tuple[int, ...] | None = None  # None: powers of two up to what the KV cache holds
    # with attention data parallelism (Scenario.attention_dp) or not; None: both where it applies (an MoE on the PyTorch
    # backend at a TP its experts divide by), else without
    attention_dp: tuple[bool, ...] | None = None


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu: str
    quant: str
    kv_cache: str
    tp: int
    backend: str
    max_batch_size: int  # with attention_dp: each GPU's, as max_num_tokens; with pp: each micro-batch's
    max_num_tokens: int
    kv_cache_free_gpu_mem_fraction: float
    concurrency: int
    latency: Latency
    interval: dict[str, tuple[float, float]] | None = None  # key -> (low, high) from the calibration's error
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    replicas: int | None = None
    gpus_needed: int | None = None
    usd_per_hour: float | None = None
    usd_per_million_output_tokens: float | None = None
    price_source: str | None = None
    accuracy: dict[str, Any] | None = None
    attention_dp: bool = False
    pp: int = 1

    @property
    def parallel(self) -> str:
        return parallel_label(self.tp, self.attention_dp, self.pp)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def label(self) -> str:
        kv = "" if self.kv_cache == "auto" else f"/kv-{self.kv_cache}"
        per_gpu = " per GPU" if self.attention_dp else " per micro-batch" if self.pp > 1 else ""
        return (f"{self.parallel} {self.gpu} {self.quant}{kv} {self.backend} batch {self.max_batch_size} "
                f"tokens {self.max_num_tokens}{per_gpu} at concurrency {self.concurrency}")


def parallel_label(tp: int, attention_dp: bool, pp: int = 1) -> str:
    """How a build splits over its GPUs: "4x" (TP) or "DEP4" (attention data parallel, experts over the 4 GPUs); with
    pipeline stages as NVIDIA's tables name them, "TP1,PP2" or "DEP2,PP2"."""
    if pp > 1:
        return f"{'DEP' if attention_dp else 'TP'}{tp},PP{pp}"
    return f"DEP{tp}" if attention_dp else f"{tp}x"


class Miss(BaseModel):
    """The closest build that does not meet the SLO: what it reaches at concurrency 1."""

    model_config = ConfigDict(frozen=True)

    build: str
    shortfall: float
    latency: Latency


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    slo: dict[str, float]
    isl: int
    osl: int
    rate: float | None
    backend: str
    best_per_gpu: list[Candidate]
    pareto: list[Candidate]
    candidates: int
    feasible: int
    skipped: dict[str, str]
    closest: Miss | None
    points: list[tuple[float, float]] = []  # (tokens/s/user, tokens/s/GPU) of every feasible build
    calibration: dict[str, Any] | None = None
    caveats: list[str] = []  # how far the published rows say to trust these predictions (MoE models, GPUs no fit saw)


def check_spec(spec: SearchSpec) -> None:
    if spec.rate is not None and not spec.rate > 0:
        raise InvalidInputError(f"--rate must be a positive number of requests/s, not {spec.rate:g}.",
                                hint="e.g. --rate 20 (or leave it out to plan one replica).")
    for gpu in spec.gpus:
        get_gpu(gpu)  # an unknown key is refused naming the table's keys
    if True in (spec.attention_dp or ()):
        check_attention_dp_backend(spec.backend)
    if any(n < 1 for n in (*spec.tps, *spec.pps, *(spec.batch_sizes or ()))):
        raise InvalidInputError("--tp, --pp and --batch-sizes take positive integers.", hint="e.g. --tp 1,2,4")


def _kv_options(spec: SearchSpec, scenario_gpu) -> tuple[str, ...]:
    if spec.kv_caches is not None:
        return spec.kv_caches
    return ("auto", "fp8") if not scenario_gpu.is_cpu else ("auto",)


def _layouts(spec: SearchSpec, model: ModelSpec) -> list[tuple[int, bool, int]]:
    """(tp, attention_dp, pp) to search: each TP without attention data parallelism, and with it where it applies (the
    PyTorch backend, an MoE whose experts the TP divides, at TP 2 or more), as the spec asks (None: both); each at every
    pipeline depth asked."""
    wanted = spec.attention_dp if spec.attention_dp is not None else (False, True)
    out = []
    for tp in spec.tps:
        applies = spec.backend == "pytorch" and model.moe_layer_count and tp > 1 and not model.num_experts % tp
        out += [(tp, dep, pp) for dep in wanted if not dep or applies or spec.attention_dp == (True,) for pp in spec.pps]
    return out


def _grid(spec: SearchSpec, scenario: Scenario) -> list[dict[str, Any]]:
    base = backend_limits(recommend(scenario, "throughput"), spec.backend)
    capacity = memory_plan(scenario, max_num_tokens=0, max_batch_size=0,
                           kv_fraction=base["kv_cache_free_gpu_mem_fraction"]).sequences_per_micro_batch
    top = max(1, min(capacity, MAX_BATCH))
    batches = spec.batch_sizes or tuple(sorted({2 ** k for k in range(13) if 2 ** k <= top} | {top}))
    budgets = sorted({*TOKEN_BUDGETS, base["max_num_tokens"]})
    return [{**base, "max_batch_size": b, "max_num_tokens": t} for b in batches for t in budgets]


def _highest(scenario: Scenario, build: dict[str, Any], slo: SloTarget, scale, eff: Efficiency) -> tuple[Latency | None, Latency]:
    """(the latency at the highest concurrency (1..batch) meeting the SLO, None when 1 does not; the latency at 1)."""
    first = scale(latency(scenario, 1, build, eff))
    if not meets(slo, first):
        return None, first
    top = scale(latency(scenario, build["max_batch_size"] * scenario.lanes, build, eff))  # every batch in flight
    if meets(slo, top):
        return top, first
    low, high, best = 1, top.concurrency, first
    while low < high - 1:  # predictions grow with concurrency: bisect for the last one that meets
        mid = (low + high) // 2
        at = scale(latency(scenario, mid, build, eff))
        if meets(slo, at):
            low, best = mid, at
        else:
            high = mid
    return best, first


def _priced(candidate: Candidate, spec: SearchSpec, price: Price | None) -> Candidate:
    update: dict[str, Any] = {}
    per_replica_rps = candidate.latency.output_tokens_per_s / spec.osl
    replicas = math.ceil(spec.rate / per_replica_rps) if spec.rate else None
    if replicas:
        update.update(replicas=replicas, gpus_needed=replicas * candidate.gpus)
    if price is not None:
        gpus = (replicas or 1) * candidate.gpus
        update.update(
            usd_per_hour=round(price.usd_per_gpu_hour * gpus, 4),
            usd_per_million_output_tokens=round(price.usd_per_gpu_hour * candidate.gpus / (candidate.latency.output_tokens_per_s * 3600) * 1e6, 4),
            price_source=f"{price.source} ({price.date})" if price.date else price.source,
        )
    return candidate.model_copy(update=update)


def search(spec: SearchSpec, prices: dict[str, Price], calibration: Calibration | None = None) -> SearchResult:
    """Every build of the spec's grid that meets the SLO, the best per GPU and the Pareto front."""
    from pipeline.planner.pareto import pareto_front

    check_spec(spec)
    model: ModelSpec = model_spec_from_config(spec.model)
    if spec.quants:  # each checked against what the checkpoint stores
        quants = tuple(dict.fromkeys(stored_precision(model, q) for q in spec.quants))
    elif model.checkpoint_quant or model.unread_quantization:  # a checkpoint that declares its precision: that one
        quants = (stored_precision(model, None),)
    else:
        quants = DEFAULT_QUANTS
    costs = accuracy_costs(spec.model, model.name)
    layouts = _layouts(spec, model)
    feasible: list[Candidate] = []
    skipped: dict[str, str] = {}
    closest: Miss | None = None
    count = 0
    for gpu_key in spec.gpus:
        calibrated = calibration is not None and calibration.matches(gpu_key, spec.backend)
        gpu = calibration.target if calibrated else plan_target(get_gpu(gpu_key))  # type: ignore[union-attr]
        factors = calibration.factors if calibrated else {}  # type: ignore[union-attr]
        no_engine = engine_flow_refusal(model, spec.backend, gpu)  # the same for every build on this GPU

        def scale(value: Latency) -> Latency:
            return calibration.apply(value) if factors else value  # type: ignore[union-attr]

        for quant in quants:
            for kv in _kv_options(spec, gpu):
                for tp, dep, pp in layouts:
                    name = f"{parallel_label(tp, dep, pp)} {gpu.key} {quant}/kv-{kv}"
                    refusal = no_engine or backend_refusal(spec.backend, gpu, quant, kv)
                    try:
                        scenario = Scenario(model, gpu, quant, kv, tp, spec.isl, spec.osl, attention_dp=dep, pp=pp).check()
                        eff = backend_efficiency(scenario, spec.backend)
                        grid = [] if refusal else _grid(spec, scenario)
                    except InvalidInputError as error:  # UnsupportedError too: precision, TP split, lengths
                        skipped[name] = error.message
                        continue
                    if refusal:
                        skipped[name] = refusal
                        continue
                    for build in grid:
                        if not memory_plan(scenario, max_num_tokens=build["max_num_tokens"], max_batch_size=build["max_batch_size"],
                                           kv_fraction=build["kv_cache_free_gpu_mem_fraction"]).fits:
                            continue
                        count += 1
                        found, first = _highest(scenario, build, spec.slo, scale, eff)
                        label = (f"{name} batch {build['max_batch_size']} tokens {build['max_num_tokens']}")
                        if found is None:
                            miss = shortfall(spec.slo, first)
                            if closest is None or miss < closest.shortfall:
                                closest = Miss(build=label, shortfall=round(miss, 3), latency=first)
                            continue
                        candidate = Candidate(
                            gpu=gpu.key, quant=quant, kv_cache=kv, tp=tp, backend=spec.backend,
                            max_batch_size=build["max_batch_size"], max_num_tokens=build["max_num_tokens"],
                            kv_cache_free_gpu_mem_fraction=build["kv_cache_free_gpu_mem_fraction"],
                            concurrency=found.concurrency, latency=found,
                            interval=calibration.interval(found) if factors else None,
                            tokens_per_s_per_gpu=round(found.output_tokens_per_s / scenario.gpus, 2),
                            tokens_per_s_per_user=found.output_tokens_per_s_per_user,
                            accuracy=costs.get((quant, kv)), attention_dp=dep, pp=pp,
                        )
                        feasible.append(_priced(candidate, spec, prices.get(gpu.key)))
    best: dict[str, Candidate] = {}
    for c in feasible:
        if c.gpu not in best or c.tokens_per_s_per_gpu > best[c.gpu].tokens_per_s_per_gpu:
            best[c.gpu] = c
    order = sorted(best.values(), key=lambda c: (c.usd_per_million_output_tokens is None,
                                                 c.usd_per_million_output_tokens or 0, -c.tokens_per_s_per_gpu))
    uncalibrated = [gpu for gpu in spec.gpus if not (calibration and calibration.matches(gpu, spec.backend))]
    return SearchResult(
        model=model.name, slo=spec.slo.bounds, isl=spec.isl, osl=spec.osl, rate=spec.rate, backend=spec.backend,
        best_per_gpu=order, pareto=pareto_front(feasible), candidates=count, feasible=len(feasible),
        skipped=skipped, closest=closest, points=[(c.tokens_per_s_per_user, c.tokens_per_s_per_gpu) for c in feasible],
        calibration=calibration.summary() if calibration else None,
        caveats=list(dict.fromkeys(  # once each: TP and DEP candidates share the model's own caveats
            (accuracy_caveats(model, spec.backend, efficiency_for(spec.backend)) if set(spec.gpus) - {"cpu"} else [])
            + (accuracy_caveats(model, spec.backend, efficiency_for(spec.backend), attention_dp=True)
               if any(dep for _, dep, _ in layouts) and set(spec.gpus) - {"cpu"} else [])
            + [c for gpu in uncalibrated for c in gpu_caveats(get_gpu(gpu).key, spec.backend, moe=bool(model.moe_layer_count))]
            + slo_caveats(set(spec.slo.bounds), set(uncalibrated), spec.backend)
            + (pp_caveats(max(spec.pps), spec.backend) if set(spec.gpus) - {"cpu"} else []))),
    )


def require_feasible(result: SearchResult) -> Candidate:
    """The best build; an SLO nothing meets is refused (exit 2) naming the closest build and what it reaches."""
    if result.best_per_gpu:
        return result.best_per_gpu[0]
    if result.closest is None:
        if result.skipped and not result.candidates:  # nothing was sized at all: say why each configuration was left out
            reasons = sorted({reason.rstrip(".") for reason in result.skipped.values()})
            raise UnsupportedError(
                f"No configuration of the search can run ({len(result.skipped)} left out): " + "; ".join(reasons[:3])
                + (f"; and {len(reasons) - 3} more reasons" if len(reasons) > 3 else "") + ".",
                hint="Change --gpus, --quant, --kv-cache, --tp or --backend (`pipeline plan --gpu KEY ...` explains one).")
        raise UnsupportedError("No build of the searched grid fits in memory.",
                               hint="Add GPUs with more memory (--gpus), a larger --tp or a smaller --quant.")
    near = result.closest
    reached = ", ".join(f"{k} {near.latency.value(k):.1f} (bound {v:g})" for k, v in result.slo.items())
    raise InvalidInputError(
        f"No build meets the SLO {', '.join(f'{k}={v:g}' for k, v in result.slo.items())} at ISL {result.isl} / OSL "
        f"{result.osl}. Closest: {near.build}, which reaches {reached} at concurrency 1.",
        hint="Relax the bound it misses, shorten ISL/OSL, or add faster GPUs (--gpus), more TP (--tp) or lower precision (--quant).",
    )

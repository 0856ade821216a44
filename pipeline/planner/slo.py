"""SLOs on TTFT and TPOT, and the planner's p50 and p99 of both for a closed loop of clients.

p50 is `timing.predict` (the mean-field steady state). p99 is the worst case a closed loop meets, and
that `pipeline bench` measures: its clients send their first requests at the same instant. So
- TTFT p99: the last of a burst of min(concurrency, batch) prompts, prefilled one max_num_tokens chunk per
  iteration behind the others (the sequences already prefilled decode in the same iterations); a client
  beyond the batch also waits for a whole wave of requests to finish (ceil(concurrency/batch) - 1 waves);
- TPOT p99: the first request of the burst, whose decode steps carry the other prompts' prefill chunks,
  then the steady state's step for the rest of its tokens; never below the p50.
Both come from the same `step_time` as everything else in the planner.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.deployable import HF_KV_CACHE_FORMATS, HF_QUANT_FORMATS
from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import GpuSpec, pytorch_restriction
from pipeline.core.quant import kv_cache_format, quant_format
from pipeline.data import packaged_fact_rows
from pipeline.planner.memory import DEFAULT_KV_FRACTION
from pipeline.planner.rates import EFFICIENCY, Efficiency, efficiency_for
from pipeline.planner.scenario import Scenario
from pipeline.planner.shapes import ModelSpec
from pipeline.planner.step import StepLoad, step_time
from pipeline.planner.timing import predict

SLO_KEYS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")
SLO_HINT = f"Use KEY=MS[,KEY=MS...] with KEY one of {', '.join(SLO_KEYS)}; e.g. --slo ttft_p99_ms=500,tpot_p99_ms=40."


class SloTarget(BaseModel):
    """Upper bounds in milliseconds, by key of SLO_KEYS."""

    model_config = ConfigDict(frozen=True)

    bounds: dict[str, float]

    def text(self) -> str:
        return ",".join(f"{k}={v:g}" for k, v in self.bounds.items())


def bounds_text(bounds: dict[str, float]) -> str:
    """SLO bounds as people read them: `ttft_p99_ms<=500, tpot_p99_ms<=40` (SloTarget.text is the parseable form)."""
    return ", ".join(f"{k}<={v:g}" for k, v in bounds.items())


def parse_slo(text: str) -> SloTarget:
    """`ttft_p99_ms=500,tpot_p99_ms=40` -> SloTarget; an unknown key or a bound that is not a positive
    number is refused naming the keys that exist."""
    bounds: dict[str, float] = {}
    for part in (p.strip() for p in re.split(r"[,\s]+", text or "") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep:
            raise InvalidInputError(f"Invalid SLO {part!r}: no '='.", hint=SLO_HINT)
        if key not in SLO_KEYS:
            raise InvalidInputError(f"Unknown SLO key {key!r}.", hint=SLO_HINT)
        try:
            bound = float(value)
        except ValueError:
            raise InvalidInputError(f"Invalid SLO {part!r}: {value!r} is not a number.", hint=SLO_HINT) from None
        if not bound > 0 or math.isinf(bound):
            raise InvalidInputError(f"Invalid SLO {part!r}: the bound must be a positive number of ms.", hint=SLO_HINT)
        bounds[key] = bound
    if not bounds:
        raise InvalidInputError("No SLO given.", hint=SLO_HINT)
    return SloTarget(bounds=bounds)


class Latency(BaseModel):
    """Predicted TTFT/TPOT p50 and p99 (ms) and throughput at one concurrency on one build."""

    model_config = ConfigDict(frozen=True)

    concurrency: int
    batch: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    output_tokens_per_s: float
    output_tokens_per_s_per_user: float

    def value(self, key: str) -> float:
        return float(getattr(self, key))

    def scaled(self, factors: dict[str, float], offsets_ms: dict[str, float] | None = None) -> "Latency":
        """A calibration applied: TTFT and TPOT times factors["ttft"] / factors["tpot"] plus offsets_ms of the
        same keys; throughput in proportion to the TPOT p50."""
        offsets = offsets_ms or {}

        def cal(metric: str, value: float) -> float:
            return round(value * factors.get(metric, 1.0) + offsets.get(metric, 0.0), 3)

        slower = cal("tpot", self.tpot_p50_ms) / self.tpot_p50_ms if self.tpot_p50_ms else 1.0
        return self.model_copy(update={
            "ttft_p50_ms": cal("ttft", self.ttft_p50_ms), "ttft_p99_ms": cal("ttft", self.ttft_p99_ms),
            "tpot_p50_ms": cal("tpot", self.tpot_p50_ms), "tpot_p99_ms": cal("tpot", self.tpot_p99_ms),
            "output_tokens_per_s": round(self.output_tokens_per_s / slower, 2),
            "output_tokens_per_s_per_user": round(self.output_tokens_per_s_per_user / slower, 3),
        })


def meets(slo: SloTarget, latency: Latency) -> bool:
    return all(latency.value(k) <= bound for k, bound in slo.bounds.items())


def shortfall(slo: SloTarget, latency: Latency) -> float:
    """The worst ratio predicted/bound over the SLO's keys (<= 1 when every bound is met)."""
    return max(latency.value(k) / bound for k, bound in slo.bounds.items())


BURST_SEGMENTS = 64  # a long burst is priced at this many points (each covering its run of equal iterations)


def _burst(scenario: Scenario, prompts: int, build: dict[str, Any], eff: Efficiency) -> list[float]:
    """Seconds of each iteration while `prompts` prompts that arrived together are prefilled, max_num_tokens
    per iteration (minus one token per sequence already decoding), in arrival order."""
    isl, budget = scenario.isl, int(build["max_num_tokens"])
    total = prompts * isl
    steps: list[float] = []
    stride = max(1, math.ceil(total / budget / BURST_SEGMENTS))
    filled = 0
    while filled < total:
        done = min(prompts - 1, filled // isl)
        chunk = max(1, min(total - filled, budget - done))
        load = StepLoad(decode=done, decode_context=isl, prefill_tokens=chunk, prefill_context=isl / 2,
                        logits_tokens=done + max(1, chunk // isl))
        seconds = step_time(scenario, load, eff).total_s
        runs = max(1, min(stride, math.ceil((total - filled) / chunk)))
        steps += [seconds] * runs
        filled += chunk * runs
    return steps


def backend_refusal(backend: str, gpu: GpuSpec, quant: str, kv: str) -> str | None:
    """Why a backend cannot deploy this precision on this GPU, or None. The PyTorch backend serves the HF checkpoints of
    `pipeline convert --format hf` (HF_QUANT_FORMATS, with an auto or fp8 KV cache) and, on a GPU, what TensorRT-LLM
    1.1.0's support matrix marks for its architecture."""
    if backend != "pytorch":
        return None
    if quant not in HF_QUANT_FORMATS or kv not in HF_KV_CACHE_FORMATS:
        return (f"the PyTorch backend deploys {', '.join(HF_QUANT_FORMATS)} checkpoints with a KV cache of "
                f"{' or '.join(HF_KV_CACHE_FORMATS)}, not {quant} with KV {kv}")
    if gpu.is_cpu:
        return None
    return pytorch_restriction(gpu, quant_format(quant), kv_cache_format(kv))


@lru_cache(maxsize=1)
def _engine_architectures() -> frozenset[str]:
    return frozenset(row["architecture"] for row in packaged_fact_rows("trtllm_engine_architectures.tsv"))


def engine_flow_refusal(model: ModelSpec, backend: str, gpu: GpuSpec) -> str | None:
    """Why no TensorRT engine can be built for this model's architecture (TensorRT-LLM's TensorRT flow has no model class
    for it: data/trtllm_engine_architectures.tsv), or None: another backend, the CPU's reference runtime, or a config
    that names no architecture."""
    if backend != "tensorrt" or gpu.is_cpu or not model.architecture or model.architecture in _engine_architectures():
        return None
    return (f"TensorRT-LLM's TensorRT flow (trtllm-build) has no model class for {model.architecture} ({model.name}): "
            "no engine can be built for it, so none is planned")


def backend_limits(build: dict[str, Any], backend: str) -> dict[str, Any]:
    """A recommended build as the backend runs it. A PyTorch-backend deployable keeps the LLM API's default KV fraction,
    0.9, for the room its CUDA graphs take (build/pytorch.py); that default: NVIDIA/TensorRT-LLM@5df359c2
    docs/source/1.0/examples/kvcacheconfig.md:31."""
    return {**build, "kv_cache_free_gpu_mem_fraction": DEFAULT_KV_FRACTION} if backend == "pytorch" else build


def backend_efficiency(scenario: Scenario, backend: str) -> Efficiency:
    """The constants a backend's latencies are predicted with: on a GPU the backend's own (rates.efficiency_for); on
    the CPU both layouts (engine folder, PyTorch-backend deployable) run the reference runtime, planned as an engine."""
    return EFFICIENCY if scenario.gpu.is_cpu else efficiency_for(backend)


def latency(scenario: Scenario, concurrency: int, build: dict[str, Any], eff: Efficiency | None = None) -> Latency:
    """p50 and p99 of TTFT and TPOT (module docstring) for `concurrency` clients on an engine built with `build`."""
    eff = eff or EFFICIENCY
    p50 = predict(scenario, concurrency, build=build, efficiency=eff)
    # one batch's prompts: each attention-DP GPU's, each pipeline micro-batch's (whose iterations are whole passes through the
    # stages while the other micro-batches' run beside them)
    burst = _burst(scenario, math.ceil(min(concurrency, p50.batch) / scenario.lanes), build, eff)
    waves = math.ceil(concurrency / p50.batch) - 1
    osl = scenario.osl
    wave_s = sum(burst) + (osl - 1) * p50.tpot_ms / 1e3  # a wave: its prompts' burst, then its decode
    ttft99 = sum(burst) + waves * wave_s
    if osl > 1:
        first = math.ceil(scenario.isl / int(build["max_num_tokens"]))  # iterations until the first prompt is in
        carried = burst[first:][: osl - 1]
        tpot99 = (sum(carried) + (osl - 1 - len(carried)) * p50.tpot_ms / 1e3) / (osl - 1)
    else:
        tpot99 = p50.tpot_ms / 1e3
    return Latency(
        concurrency=concurrency, batch=p50.batch,
        ttft_p50_ms=p50.ttft_ms, ttft_p99_ms=round(max(ttft99 * 1e3, p50.ttft_ms), 3),
        tpot_p50_ms=p50.tpot_ms, tpot_p99_ms=round(max(tpot99 * 1e3, p50.tpot_ms), 3),
        output_tokens_per_s=p50.output_tokens_per_s, output_tokens_per_s_per_user=p50.output_tokens_per_s_per_user,
    )

"""Speculative decoding in the timing model: from an acceptance rate, the TPOT and output throughput with and
without speculation at each concurrency, the break-even concurrency, and whether to enable it for an SLO.

The model (ours, on top of planner.timing's step_time):
- With a per-token acceptance rate a and K draft tokens, one verification step emits on average
  E = (1 - a^(K+1)) / (1 - a) tokens per sequence (K + 1 at a = 1): the accepted prefix plus the target's own token
  (the standard result for greedy verification of i.i.d. acceptances, Leviathan et al. 2023).
- A verification step at concurrency B is one target iteration carrying B * (K + 1) tokens through the GEMMs and the
  lm_head, attention over each sequence's context for each of them, and the prefill of the requests that replace
  finished ones (E times as many per step, since requests finish E times sooner).
- Drafting: draft-target runs K decode steps of the draft model at concurrency B; n-gram and lookahead draft for free
  (lookahead's branches are already inside the K verified tokens).
At low concurrency the step is bound by reading the weights, so K + 1 tokens cost about what one does and the speedup
approaches E; as B grows the step turns compute-bound, the K extra tokens per sequence cost their FLOPs, and
speculation stops paying: the break-even concurrency. With long contexts the verification step also reads each
sequence's KV cache once for K + 1 tokens, so the decode attention is amortised too and the break-even moves up (or
out of range).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from pipeline.planner.scenario import Scenario
from pipeline.planner.step import StepLoad, step_time, steady_load


@dataclass(frozen=True)
class SpeculationModel:
    """acceptance: per-draft-token acceptance rate (0..1); draft: the draft model's scenario (draft-target), None for
    a draft-free method."""

    acceptance: float
    max_draft_len: int
    draft: Scenario | None = None


def tokens_per_step(acceptance: float, max_draft_len: int) -> float:
    """Mean tokens a verification step emits per sequence: (1 - a^(K+1)) / (1 - a)."""
    a, k = min(max(acceptance, 0.0), 1.0), max_draft_len
    return float(k + 1) if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


class SpeculationPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    concurrency: int
    tpot_ms: float
    tpot_spec_ms: float
    tokens_per_s: float
    tokens_per_s_spec: float
    speedup: float  # tokens/s with speculation over without (= TPOT ratio at the same concurrency)


def _verify_s(scenario: Scenario, spec: SpeculationModel, batch: int, emitted: float) -> float:
    k = spec.max_draft_len
    context = scenario.isl + scenario.osl / 2
    load = StepLoad(decode=batch, decode_context=context,
                    prefill_tokens=batch * k + batch * scenario.isl / scenario.osl * emitted,
                    prefill_context=context, logits_tokens=batch * (k + 1))
    return step_time(scenario, load).total_s


def _draft_s(spec: SpeculationModel, batch: int) -> float:
    if spec.draft is None:
        return 0.0
    return spec.max_draft_len * step_time(spec.draft, steady_load(spec.draft, batch)).total_s


def speculation_point(scenario: Scenario, spec: SpeculationModel, concurrency: int) -> SpeculationPoint:
    """TPOT and output tokens/s at one concurrency, with and without speculation."""
    base_s = step_time(scenario, steady_load(scenario, concurrency)).total_s
    emitted = tokens_per_step(spec.acceptance, spec.max_draft_len)
    spec_s = (_verify_s(scenario, spec, concurrency, emitted) + _draft_s(spec, concurrency)) / emitted
    return SpeculationPoint(concurrency=concurrency, tpot_ms=round(base_s * 1e3, 4), tpot_spec_ms=round(spec_s * 1e3, 4),
                            tokens_per_s=round(concurrency / base_s, 2), tokens_per_s_spec=round(concurrency / spec_s, 2),
                            speedup=round(base_s / spec_s, 4))


def speculation_curve(scenario: Scenario, spec: SpeculationModel, concurrencies: list[int]) -> list[SpeculationPoint]:
    return [speculation_point(scenario, spec, c) for c in concurrencies]


def break_even(points: list[SpeculationPoint]) -> int | None:
    """The lowest concurrency at which speculation no longer pays (speedup <= 1); None if it pays at every one."""
    return next((p.concurrency for p in sorted(points, key=lambda p: p.concurrency) if p.speedup <= 1.0), None)


def recommend_speculation(point: SpeculationPoint, tpot_slo_ms: float | None = None) -> tuple[bool, str]:
    """Whether to enable speculation at this concurrency for a TPOT SLO, and why."""
    if point.speedup <= 1.0:
        return False, (f"at concurrency {point.concurrency} speculation costs more than it saves (speedup "
                       f"{point.speedup:.2f}x): leave it off")
    if tpot_slo_ms is not None and point.tpot_ms <= tpot_slo_ms and point.tpot_spec_ms > tpot_slo_ms:
        return False, f"the SLO TPOT {tpot_slo_ms} ms holds without speculation and not with it"
    meets = "" if tpot_slo_ms is None else (f"; TPOT {point.tpot_spec_ms:.2f} ms "
                                            f"{'meets' if point.tpot_spec_ms <= tpot_slo_ms else 'misses'} the SLO {tpot_slo_ms} ms")
    return True, f"speculation is {point.speedup:.2f}x faster at concurrency {point.concurrency}{meets}"


class SpeculationPlan(BaseModel):
    """`pipeline plan --speculative-acceptance`: the curve, its break-even and the call at the asked concurrency."""

    model_config = ConfigDict(frozen=True)

    acceptance: float
    max_draft_len: int
    draft_model: str | None
    tokens_per_step: float
    points: list[SpeculationPoint]
    break_even_concurrency: int | None
    enable: bool
    why: str


def speculation_plan(scenario: Scenario, spec: SpeculationModel, concurrency: int, max_batch_size: int,
                     tpot_slo_ms: float | None = None) -> SpeculationPlan:
    """Speedup at 1, 2, 4, ... up to the build's max_batch_size (and at `concurrency`); enable it at `concurrency`?"""
    levels = sorted({1 << i for i in range(max(max_batch_size, 1).bit_length())} | {concurrency})
    points = speculation_curve(scenario, spec, levels)
    enable, why = recommend_speculation(next(p for p in points if p.concurrency == concurrency), tpot_slo_ms)
    return SpeculationPlan(acceptance=spec.acceptance, max_draft_len=spec.max_draft_len,
                           draft_model=spec.draft.model.name if spec.draft else None,
                           tokens_per_step=round(tokens_per_step(spec.acceptance, spec.max_draft_len), 3), points=points,
                           break_even_concurrency=break_even(points), enable=enable, why=why)

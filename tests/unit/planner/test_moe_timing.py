"""An MoE shape's timing carried over from another GPU where silicon did not time it on the planned one
(pipeline/planner/moe_timing.py), checked against the measurements it did not see."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from pipeline import planner
from pipeline.core.gpus import get_gpu
from pipeline.core.quant import quant_format
from pipeline.planner.entry import PlanSpec, plan
from pipeline.planner.moe_timing import _moe_table, carried_over, held_out_errors, measured_moe_s, moe_key, moe_timing_for
from pipeline.planner.caveats import CARRIED_OVER_ERROR
from pipeline.planner.published import published_model

GPT_OSS_120B = published_model("gpt-oss-120b")  # 128 MXFP4 experts: silicon timed them on H200, not on H100
BF16 = quant_format("bf16")


def test_a_measured_shape_is_its_measurement() -> None:
    key = moe_key(get_gpu("h200"), BF16, GPT_OSS_120B, 4, expert_parallel=True)
    timing = moe_timing_for(key)
    assert timing is not None and timing.donor is None and timing.curve == _moe_table()[key]


def test_gpt_oss_120b_on_h100_takes_h200s_timing_scaled_by_the_shape_both_measured() -> None:
    h100 = get_gpu("h100")
    key = moe_key(h100, BF16, GPT_OSS_120B, 4, expert_parallel=True)
    assert key not in _moe_table()
    timing = moe_timing_for(key)
    # B200 timed the shape too (at 16-bit activations) and shares as few shapes with H100: the tie goes to the same architecture
    assert timing.donor == "h200" and len(timing.references) == 1
    table = _moe_table()
    h200_128, h200_32, h100_32 = (table[(gpu, *key[1:5], experts, 1, 4)] for gpu, experts in
                                  (("h200", 128), ("h200", 32), ("h100-sxm", 32)))
    for tokens in (8, 1000, 8192, 100_000):
        expected = _at(h200_128, tokens) * _at(h100_32, tokens) / _at(h200_32, tokens)
        assert measured_moe_s(h100, BF16, GPT_OSS_120B, 4, tokens, expert_parallel=True) == pytest.approx(expected)
    # the same chip with less HBM bandwidth: within a few per cent of H200's time, either way (silicon's own noise)
    assert all(0.9 < timing.seconds(n) / _at(h200_128, n) < 1.15 for n in (16, 256, 4096, 16384))


def test_nothing_to_carry_over_gives_none() -> None:
    nvfp4 = quant_format("nvfp4")
    qwen = published_model("qwen3-30b-a3b")
    assert measured_moe_s(get_gpu("h100"), nvfp4, qwen, 1, 1024) is None  # no GPU of H100's timed NVFP4 MoE shapes
    assert measured_moe_s(get_gpu("l4"), quant_format("fp8"), qwen, 1, 1024) is None  # a GPU silicon timed nothing on
    assert moe_key(get_gpu("h100"), BF16, published_model("llama-3.1-8b"), 1) is None  # dense
    made_up = ("h200", "fp8", 1234, 567, 3, 77, 1, 1)
    assert carried_over(made_up, _moe_table()) is None  # no GPU measured that shape


def test_the_caveats_figures_are_what_holding_each_shape_out_gives() -> None:
    """caveats.CARRIED_OVER_ERROR, which the plan's caveat quotes, is scripts/moe_transfer_check.py's result."""
    errors = held_out_errors()
    assert set(errors) == set(CARRIED_OVER_ERROR)
    for gpu, (median, p90) in CARRIED_OVER_ERROR.items():
        ranked = sorted(errors[gpu])
        assert (statistics.median(ranked), ranked[int(0.9 * len(ranked))]) == pytest.approx((median, p90), abs=0.05), gpu
    # Hopper, which the carrying over serves for GPT-OSS 120B and Llama 4 Maverick, within 7% in the median
    assert CARRIED_OVER_ERROR["h100-sxm"][0] < 7 and CARRIED_OVER_ERROR["h200"][0] < 7


def test_the_plan_says_where_the_experts_timing_came_from() -> None:
    result = plan(PlanSpec(model=_model_json(GPT_OSS_120B), gpu="h100", tp=4, isl=1024, osl=1024, backend="pytorch",
                           attention_dp=True))
    carried = [c for c in result.caveats if "carried" in c or "take h200's measurement" in c]
    assert len(carried) == 1 and "silicon timed this MoE shape on h200 but not on h100-sxm" in carried[0]
    assert f"{CARRIED_OVER_ERROR['h100-sxm'][0]:.1f}% from silicon on h100-sxm" in carried[0]
    assert result.model["experts_timing"] == "carried over from h200's silicon timing"
    measured = plan(PlanSpec(model=_model_json(GPT_OSS_120B), gpu="h200", tp=4, isl=1024, osl=1024, backend="pytorch",
                             attention_dp=True))
    assert not any("measurement, scaled" in c for c in measured.caveats)
    assert measured.model["experts_timing"] == "measured on silicon for this GPU"
    nothing = plan(PlanSpec(model=_model_json(GPT_OSS_120B), gpu="a100", tp=2, isl=1024, osl=1024, backend="pytorch"))
    assert nothing.model["experts_timing"] == "1.0 of the dense GEMM rate"  # no GPU timed MXFP4 experts at expert TP 2
    dense = plan(PlanSpec(model=_model_json(published_model("llama-3.1-8b")), gpu="h100", backend="pytorch"))
    assert dense.model["experts_timing"] is None


def _at(curve: tuple[list[float], list[float]], tokens: float) -> float:
    from pipeline.planner.comm import measured_at

    return measured_at(*curve, tokens)


def _model_json(spec) -> Path:
    return Path(planner.__file__).parents[1] / "data" / "published_models" / f"{spec.name}.json"


"""pipeline.planner.search / pareto / calibrate: the SLO search over builds, its front, its calibration
(expectations derived from the planner's own functions, never hard-coded figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.planner.calibrate import fit_factor_offset, fit_calibration, prediction_error
from pipeline.planner.cpu import plan_target
from pipeline.planner.pareto import pareto_front, write_plan_report
from pipeline.planner.prices import load_prices
from pipeline.planner.search import SearchSpec, require_feasible, search
from pipeline.planner.slo import latency, meets, parse_slo

from planner_cases import LLAMA_8B


def _spec(slo: str, **extra) -> SearchSpec:
    values = dict(model=LLAMA_8B, slo=parse_slo(slo), isl=2048, osl=256, gpus=("h100", "l40s"), quants=("fp8", "fp16"),
                  tps=(1, 2))
    return SearchSpec(**{**values, **extra})


@pytest.fixture(scope="module")
def result():
    return search(_spec("ttft_p99_ms=800,tpot_p99_ms=40", rate=20), load_prices(None, ["l40s=1.5"]))


def test_every_reported_build_meets_the_slo_at_its_concurrency_and_one_more_does_not(result) -> None:
    slo = parse_slo("ttft_p99_ms=800,tpot_p99_ms=40")
    assert result.feasible and result.best_per_gpu
    for c in result.best_per_gpu + result.pareto:
        scenario = P.Scenario(LLAMA_8B, c.gpu, c.quant, c.kv_cache, c.tp, 2048, 256)
        build = {"max_batch_size": c.max_batch_size, "max_num_tokens": c.max_num_tokens,
                 "kv_cache_free_gpu_mem_fraction": c.kv_cache_free_gpu_mem_fraction}
        assert c.latency == latency(scenario, c.concurrency, build) and meets(slo, c.latency)
        if c.concurrency < c.latency.batch:
            assert not meets(slo, latency(scenario, c.concurrency + 1, build))
        assert c.tokens_per_s_per_gpu == pytest.approx(c.latency.output_tokens_per_s / c.tp, rel=1e-3)


def test_best_per_gpu_first_priced_from_the_table_with_replicas_for_the_rate(result) -> None:
    assert len({c.gpu for c in result.best_per_gpu}) == len(result.best_per_gpu) == 2
    for c in result.best_per_gpu:
        price = load_prices(None, ["l40s=1.5"])[c.gpu]
        per_replica = c.latency.output_tokens_per_s / 256
        assert c.replicas == -(-20 // per_replica) and c.gpus_needed == c.replicas * c.tp
        assert c.usd_per_hour == pytest.approx(price.usd_per_gpu_hour * c.gpus_needed, rel=1e-3)
        expected = price.usd_per_gpu_hour * c.tp / (c.latency.output_tokens_per_s * 3600) * 1e6
        assert c.usd_per_million_output_tokens == pytest.approx(expected, rel=1e-3)
    costs = [c.usd_per_million_output_tokens for c in result.best_per_gpu]
    assert costs == sorted(costs)


def test_a_gpu_without_a_price_is_listed_without_cost() -> None:
    result = search(_spec("tpot_p99_ms=60", gpus=("a10g",), quants=("fp16",), tps=(1,), isl=512, osl=128), load_prices())
    assert result.best_per_gpu and all(c.usd_per_hour is None and c.usd_per_million_output_tokens is None
                                       for c in result.best_per_gpu)


def test_the_front_is_not_dominated_and_is_plotted_beside_the_json(result, tmp_path: Path) -> None:
    front = result.pareto
    points = result.points
    for c in front:
        assert not any(u > c.tokens_per_s_per_user and g > c.tokens_per_s_per_gpu for u, g in points)
    assert pareto_front(front) == front
    files = write_plan_report(result, tmp_path)
    assert files["plot"].parent == files["json"].parent and files["plot"].stat().st_size > 5000
    assert json.loads(files["json"].read_text())["best_per_gpu"][0]["gpu"] == result.best_per_gpu[0].gpu


def test_an_infeasible_slo_names_the_closest_build_and_what_it_reaches() -> None:
    result = search(_spec("ttft_p99_ms=1,tpot_p99_ms=0.5"), load_prices())
    assert not result.best_per_gpu and result.closest is not None
    with pytest.raises(InvalidInputError) as error:
        require_feasible(result)
    assert result.closest.build in error.value.message and "ttft_p99_ms" in error.value.message


def _bench_file(tmp_path: Path, name: str, *, model: str, gpu: str, factor: float, isl: int, osl: int,
                offset: float = 0.0, per_token: float = 0.0, quant: str = "fp8") -> Path:
    """A bench.json whose measurements are the planner's own prediction times `factor` (what calibration must find),
    plus `offset` ms on TTFT and `per_token` ms on TPOT (fixed costs the model has no term for)."""
    build = {"max_batch_size": 16, "max_num_tokens": 4096, "kv_cache_free_gpu_mem_fraction": 0.9}
    kv = "fp8" if quant == "fp8" else None
    scenario = P.Scenario(LLAMA_8B, plan_target(gpu), quant, kv, 1, isl, osl)
    levels = []
    for c in (1, 4, 8):
        lat = latency(scenario, c, {**build, "max_input_len": isl, "max_seq_len": isl + osl})
        levels.append({"load": f"c={c}", "concurrency": c, "completed": 8, "isl": {"mean": isl}, "osl": {"mean": osl},
                       "ttft_ms": {"p50": lat.ttft_p50_ms * factor + offset, "p99": lat.ttft_p99_ms * factor + offset},
                       "tpot_ms": {"p50": lat.tpot_p50_ms * factor + per_token, "p99": lat.tpot_p99_ms * factor + per_token}})
    deployment = {"model": model, "gpu": gpu, "backend": "tensorrt", "quant": quant, "kv_cache": kv, "tp": 1, **build}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"deployment": deployment, "levels": levels}))
    return path


def test_calibration_finds_the_factor_and_its_prediction_holds_at_another_isl(tmp_path: Path) -> None:
    model = P.model_spec_from_config(LLAMA_8B)
    fitted = _bench_file(tmp_path, "a", model="llama-3.1-8b", gpu="h100-sxm", factor=1.7, isl=512, osl=64)
    other = _bench_file(tmp_path, "b", model="llama-3.1-8b", gpu="h100-sxm", factor=1.7, isl=2048, osl=128)
    cal = fit_calibration([fitted], model, LLAMA_8B, ("h100",))
    assert cal.factors == {"ttft": pytest.approx(1.7, rel=1e-3), "tpot": pytest.approx(1.7, rel=1e-3)}
    assert cal.error_before["median_pct"] == pytest.approx(100 * (1 - 1 / 1.7), rel=1e-2)
    assert cal.error_after["worst_pct"] < 0.5
    assert prediction_error([other], model, cal)["worst_pct"] < prediction_error([other], model, None)["worst_pct"]
    calibrated = search(_spec("tpot_p99_ms=60", gpus=("h100",), quants=("fp8",), tps=(1,)), load_prices(), cal)
    best = calibrated.best_per_gpu[0]
    assert best.interval and best.interval["tpot_p99_ms"][0] <= best.latency.tpot_p99_ms <= best.interval["tpot_p99_ms"][1]
    # calibrated from the deployment's own bench, a TTFT p50 bound no longer needs the published serving runs' caveat
    p50 = search(_spec("ttft_p50_ms=800,tpot_p99_ms=60", gpus=("h100",), quants=("fp8",), tps=(1,)), load_prices(), cal)
    assert not any(c.startswith("a ttft_p50_ms bound") for c in p50.caveats)


def test_calibration_separates_a_fixed_cost_from_a_proportional_one(tmp_path: Path) -> None:
    model = P.model_spec_from_config(LLAMA_8B)
    fitted = _bench_file(tmp_path, "a", model="llama-3.1-8b", gpu="h100-sxm", factor=1.3, offset=25.0, isl=512, osl=64)
    other = _bench_file(tmp_path, "b", model="llama-3.1-8b", gpu="h100-sxm", factor=1.3, offset=25.0, isl=4096, osl=256)
    cal = fit_calibration([fitted], model, LLAMA_8B, ("h100",))
    assert cal.factors["ttft"] == pytest.approx(1.3, rel=1e-2) and cal.offsets_ms["ttft"] == pytest.approx(25.0, rel=2e-2)
    assert prediction_error([other], model, cal)["worst_pct"] < 1.0 < prediction_error([other], model, None)["worst_pct"]


def test_on_the_cpu_calibration_fits_the_fixed_costs_its_measured_rates_cannot_see(tmp_path: Path) -> None:
    model = P.model_spec_from_config(LLAMA_8B)
    costs = {"factor": 1.0, "offset": 80.0, "per_token": 30.0, "quant": "fp16"}  # Python per request and per token
    fitted = _bench_file(tmp_path, "a", model="llama-3.1-8b", gpu="cpu", isl=64, osl=16, **costs)
    other = _bench_file(tmp_path, "b", model="llama-3.1-8b", gpu="cpu", isl=256, osl=8, **costs)
    cal = fit_calibration([fitted], model, LLAMA_8B, ("cpu",))
    assert cal.factors == {"ttft": 1.0, "tpot": 1.0}
    assert cal.offsets_ms == {"ttft": pytest.approx(80.0, rel=1e-3), "tpot": pytest.approx(30.0, rel=1e-3)}
    assert prediction_error([other], model, cal)["worst_pct"] < 0.5
    # measured growing faster than predicted across levels (a free fit wants a negative offset): on a GPU the
    # factor alone, on the CPU the fixed cost alone
    steep = [(55.0, 31.0), (70.0, 31.0), (116.0, 45.0), (141.0, 45.0)]  # (measured, predicted) TPOT ms, c=1 and c=2
    gpu_factor, gpu_offset = fit_factor_offset(steep)
    cpu_factor, cpu_offset = fit_factor_offset(steep, fixed_costs_first=True)
    assert gpu_factor > 2 and gpu_offset == 0.0 and cpu_factor == 1.0 and 30 < cpu_offset < 50
    # a model that predicts too much on this host: a fixed cost cannot take it back, a factor below 1 does
    slower = fit_calibration([_bench_file(tmp_path, "c", model="llama-3.1-8b", gpu="cpu", isl=64, osl=16, factor=0.6,
                                          quant="fp16")], model, LLAMA_8B, ("cpu",))
    assert slower.factors["tpot"] == pytest.approx(0.6, rel=1e-3) and slower.offsets_ms["tpot"] == 0.0


@pytest.mark.parametrize("model, gpu, words", [("llama-3.1-70b", "h100-sxm", "another model"), ("llama-3.1-8b", "h200", "another GPU")])
def test_a_calibration_file_from_another_model_or_gpu_is_refused(tmp_path: Path, model: str, gpu: str, words: str) -> None:
    path = _bench_file(tmp_path, "x", model=model, gpu=gpu, factor=1.0, isl=512, osl=64)
    with pytest.raises(InvalidInputError) as error:
        fit_calibration([path], P.model_spec_from_config(LLAMA_8B), LLAMA_8B, ("h100",))
    assert words in error.value.message and error.value.hint


def test_a_bench_file_without_a_deployment_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"levels": []}))
    with pytest.raises(InvalidInputError, match="deployment"):
        fit_calibration([path], P.model_spec_from_config(LLAMA_8B), LLAMA_8B, ("h100",))


def test_the_pytorch_backend_is_offered_only_what_it_deploys() -> None:
    """The LLM API serves the HF checkpoints of `pipeline convert --format hf` (fp16, bf16, fp8, nvfp4, int4_awq,
    w4a8_awq; KV auto or fp8), so an INT8 SmoothQuant build or an INT8 KV cache is skipped with the reason, while an
    engine search keeps them (before: the PyTorch search recommended int8_sq with an INT8 KV cache on H100)."""
    from pipeline.core.deployable import HF_KV_CACHE_FORMATS, HF_QUANT_FORMATS

    wide = dict(gpus=("h100",), quants=("int8_sq", "fp8"), kv_caches=("auto", "int8"), tps=(1,))
    pytorch = search(_spec("tpot_p99_ms=60", backend="pytorch", **wide), {})
    engines = search(_spec("tpot_p99_ms=60", backend="tensorrt", **wide), {})
    offered = {(c.quant, c.kv_cache) for c in pytorch.pareto + pytorch.best_per_gpu}
    assert offered and all(q in HF_QUANT_FORMATS and kv in HF_KV_CACHE_FORMATS for q, kv in offered)
    assert "the PyTorch backend deploys" in pytorch.skipped["1x h100-sxm int8_sq/kv-int8"]
    assert ("int8_sq", "int8") in {(c.quant, c.kv_cache) for c in engines.pareto + engines.best_per_gpu}
    assert not any("PyTorch" in reason for reason in engines.skipped.values())


def test_a_search_whose_every_configuration_is_left_out_says_why() -> None:
    """Every configuration refused before any build is sized (here: the PyTorch backend does not deploy INT8
    SmoothQuant): exit 2 with the reasons, not "nothing fits in memory"."""
    result = search(_spec("tpot_p99_ms=60", backend="pytorch", gpus=("h100",), quants=("int8_sq",), tps=(1,)), {})
    assert result.candidates == 0 and result.skipped
    with pytest.raises(UnsupportedError, match="No configuration of the search can run") as refused:
        require_feasible(result)
    assert "the PyTorch backend deploys" in refused.value.message and ".." not in refused.value.message


@pytest.mark.parametrize("path, name", [("build/llama-3.1-8b/hf", "llama-3.1-8b"), ("build/llama-3.1-8b/hf/config.json", "llama-3.1-8b"),
                                        ("models/qwen3-8b", "qwen3-8b"), ("configs/llama-3.1-8b.json", "llama-3.1-8b")])
def test_a_plan_names_the_model_as_its_deployment_does(path: str, name: str) -> None:
    """The name that the plan's reports folder and a calibration's identity check use (before: a config file named after
    its model, llama-3.1-8b.json, kept its suffix, so its reports went to build/llama-3.1-8b.json/)."""
    from pipeline.planner.calibrate import model_identity

    assert model_identity(Path(path)) == name

"""pipeline.planner.published and scripts/plan_vs_published.py: the time model against TensorRT-LLM's published
throughput (pipeline/data/trtllm_published_throughput.tsv), cross-validated honestly."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.planner.caveats import tpot_caveats
from pipeline.planner.published import published_rows
from pipeline.planner.rates import PRIOR, efficiency_for, fp4_share_of_fp8
from pipeline.planner.step import StepLoad, step_work
from planner_cases import assert_beside, script_module

# README, "Capacity and latency planning", quotes these cross-validated figures (median, worst |error| %, pooled
# over every fold of that kind); each fold is refitted on its training rows only, from PRIOR (and, for the PyTorch
# backend, also from the best point of a grid fixed in advance: before that its GPU folds gave 19.1% / 58.2%).
# Before trtllm-bench's own limits, the dynamic batch tuner, the chunk mix and the per-sequence cost (plan-acc3):
# engines 7.5/55.2 and 13.9/70.7, PyTorch 10.8/40.1 and 7.8/35.3. Before TP's all-reduces measured on silicon
# (comm.measured_allreduce_s): engines 6.7/44.4 and 10.1/52.9, PyTorch 9.5/32.3 and 8.0/28.8. Before FP4 GEMMs got
# their own compute fraction: PyTorch 8.2/28.8 and 7.6/25.0. Before the engine rows counted their runs' waves of
# requests, a GEMM's time became the 2-norm of its reads and math, KV reads got their own bandwidth fraction and the
# L40S its ECC-on memory: engines 6.4/33.8 and 8.9/39.0. Before FP4 without rows of its own followed FP8 by the ratio
# measured on silicon (and the fit started FP4 there), and the PyTorch rows counted their waves too: PyTorch 4.6/28.8 and
# 4.8/16.2 (the FP4 rule alone: 4.0/15.5 and 5.4/17.0). Before the engines' KV reads took silicon's per-shape figures
# (rates.kv_read_fraction) instead of one fitted fraction: engines 4.2/26.7 and 7.0/29.4; before their compute fractions
# became shares of the GEMM rates measured on silicon (rates.measured_gemm_rate): 4.3/23.3 and 4.6/24.7. Before trtllm-bench's
# limits for NVFP4 checkpoints counted the elements their safetensors hold (published.bench_param_count): PyTorch 3.6/15.0
# and 4.8/18.3. Before each published run was replayed iteration by iteration as the scheduler serves its dataset
# (planner/offline.py) instead of as waves of a steady state: engines 4.0/17.6 and 4.6/24.2, PyTorch 3.6/15.0 and 4.6/18.3.
# Before the 1.2-dev page's 1000/1000 rows were replayed with their run's 3000 requests (data/trtllm_bench_requests.tsv)
# instead of as steady state: PyTorch 3.8/14.3 and 3.8/15.8. Before the PyTorch backend's fit added the silicon serving rows'
# TPOT at a tenth of the weight and read the KV cache at silicon's figures (rates.py): 3.8/15.2 and 3.9/15.8.
CV_QUOTED = {
    ("tensorrt", "gpu"): (4.1, 17.5), ("tensorrt", "model"): (4.0, 25.4),
    ("pytorch", "gpu"): (3.7, 14.5), ("pytorch", "model"): (4.3, 12.3),
}
# The same PyTorch folds on the silicon serving rows of the GPU or model each held out (planner/serving_sample.py): TPOT
# median |error| % and mean signed %, ours and AIConfigurator's on the rows it answered. Before those rows were in the fit
# (each fold then predicting them with constants fitted on throughput alone): 22.9% / +24.7% and 22.5% / +26.4%.
SERVING_TPOT_HELD_OUT = {"gpu": ((13.8, -3.7), (12.4, 13.9)), "model": ((12.4, 12.1), (23.4, 24.6))}


def _in_two_processes(function: str, *arguments: tuple) -> list:
    """scripts/plan_vs_published.py's `function` mapped over `arguments` in two fresh processes (spawned, not forked, as
    this process may hold other tests' threads)."""
    import importlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    script_module()  # puts scripts/ on sys.path, which the spawned processes inherit
    script = importlib.import_module("plan_vs_published")
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(getattr(script, function), *arguments))


def test_published_table_normalises_per_gpu_figures_and_names_its_source() -> None:
    rows = published_rows()
    assert {r["backend"] for r in rows} == {"tensorrt", "pytorch"}
    units = {r["published_unit"] for r in rows}
    assert units == {"total", "per_gpu"}
    for r in rows:
        factor = int(r["tp"]) if r["published_unit"] == "per_gpu" else 1
        assert float(r["tokens_per_s"]) == pytest.approx(float(r["published_value"]) * factor, abs=0.01)
        assert r["repo"] == "NVIDIA/TensorRT-LLM" and len(r["commit"]) == 40 and r["file"].endswith("perf-overview.md")
        assert int(r["line"]) > 0
        P.published_model(r["model"])  # every model has its shapes


@pytest.mark.parametrize("backend", ["tensorrt", "pytorch"])
def test_in_sample_against_published_throughput(backend: str) -> None:
    """The constants in rates.py on all rows of their backend (in sample: not the figure to quote)."""
    comparison = P.compare_published(None, published_rows(backend))
    assert P.median_abs_pct_error(comparison) <= 10.0
    assert max(abs(r["error_pct"]) for r in comparison) <= 55.0


def _small_table() -> list[dict[str, str]]:
    return [r for r in published_rows("tensorrt") if r["model"] == "llama-3.1-8b" and r["gpu"] in ("a100-80gb", "h200")]


def test_the_fits_loss_is_the_comparisons_to_the_bit() -> None:
    """loss_over lays each row's run out once and, per structure of the constants, each iteration's work once; for any
    constants, either structure, and in any order, it equals the loss of compare_published's rows exactly. A work laid
    out for one structure refuses constants of another."""
    rows = _small_table() + published_rows("pytorch")[:6] + P.more_model_rows("mixtral")[:3]
    loss = P.loss_over(rows)
    engines, pytorch = efficiency_for("tensorrt"), efficiency_for("pytorch")
    for eff in (engines, pytorch, replace(engines, bandwidth=0.5, compute_8bit=0.7, moe_expert_compute=0.6), PRIOR, engines):
        assert loss(eff) == P.comparison_log_loss(P.compare_published(None, rows, efficiency=eff))
    scenario = P.published_scenario(P.published_model("llama-3.1-8b"), rows[0])
    work = step_work(scenario, StepLoad(decode=8, decode_context=512, prefill_tokens=0, prefill_context=0), engines)
    assert work.time(engines) == P.step_time(scenario, StepLoad(8, 512, 0, 0), engines)
    with pytest.raises(ValueError, match="another structure"):
        work.time(pytorch)


def test_a_fold_never_sees_its_held_out_rows() -> None:
    """Held-out rows do not move their fold's constants, and a constant no training row informs stays at PRIOR
    (before: every fold started from the constants fitted on all rows, and the A100 fold kept their 16-bit compute)."""
    module = script_module()
    rows = _small_table()
    folds = {f["value"]: f for f in module.cross_validate(rows, "gpu")}
    a100 = folds["a100-80gb"]
    assert a100["constants"]["compute_efficiency_16bit"] == PRIOR.compute_16bit
    # no FP4 row in this table either: FP4 takes the fitted 8-bit share of the silicon rates (which hold the FP4/FP8 ratio);
    # an engine's KV reads are never fitted (the fraction measured on silicon), so they are not a constant kept at PRIOR
    assert a100["kept_at_prior"] == ["compute_efficiency_16bit", "compute_efficiency_4bit"]
    assert a100["constants"]["kv_bandwidth_efficiency"] == "measured"
    assert a100["constants"]["compute_efficiency_4bit"] == a100["constants"]["compute_efficiency_8bit"]
    assert PRIOR.compute_for(4) == pytest.approx(PRIOR.compute_8bit * fp4_share_of_fp8())  # PRIOR: shares of the datasheet
    doubled = [{**r, "tokens_per_s": str(2 * float(r["tokens_per_s"]))} if r["gpu"] == "a100-80gb" else r for r in rows]
    again = {f["value"]: f for f in module.cross_validate(doubled, "gpu")}["a100-80gb"]
    assert again["constants"] == a100["constants"]
    assert again["median_abs_pct_error"] != a100["median_abs_pct_error"]


@pytest.mark.slow
def test_cross_validated_error_is_what_the_readme_quotes() -> None:
    """Every fold (each GPU, then each model, held out whole) on both backends; the pooled figures are the README's.
    The four cross-validations are independent: two fresh processes run them (a minute of fitting in all; spawned, not
    forked, as this process may hold other tests' threads)."""
    cases = list(CV_QUOTED)
    results = _in_two_processes("pooled_cross_validation", *zip(*cases))
    for (backend, by), (values, pooled) in zip(cases, results):
        rows = published_rows(backend)
        assert sorted(values) == sorted({r[by] for r in rows})
        print(f"{backend} by {by}: median {pooled['median_abs_pct_error']:.1f}% worst {pooled['max_abs_pct_error']:.1f}%")
        assert pooled["rows"] == len(rows)
        median, worst = CV_QUOTED[(backend, by)]
        assert pooled["median_abs_pct_error"] == pytest.approx(median, abs=0.5)
        assert pooled["max_abs_pct_error"] == pytest.approx(worst, abs=0.5)
        tpot = pooled["serving_tpot"]
        if backend == "tensorrt":
            assert tpot is None  # the sample is the PyTorch backend's
            continue
        for who, (median, signed) in zip(("ours", "aiconfigurator"), SERVING_TPOT_HELD_OUT[by]):
            assert (tpot[who]["median_abs_pct_error"], tpot[who]["mean_signed_pct"]) == pytest.approx((median, signed), abs=0.5), who
    caveat, = tpot_caveats("pytorch", {"h100-sxm"})
    gpu, model = (SERVING_TPOT_HELD_OUT[by][0][0] for by in ("gpu", "model"))
    assert f"with the GPU or the model held out, the rows came out {gpu}% and {model}% off in the median" in caveat


@pytest.mark.slow
def test_published_quantized_runs_had_an_fp8_kv_cache() -> None:
    """The FP8 and FP4 rows are planned with an FP8 KV cache; refitted with a 16-bit one instead, each backend's fit is
    several times worse than its shipped constants (README: engines' loss 0.48 -> 9.6, PyTorch 0.17 -> 5.4), so the rows
    say which cache the runs had. A row's own `kv_cache` column is what the 16-bit variant sets. Both backends in two
    spawned processes."""
    results = dict(zip(("tensorrt", "pytorch"), _in_two_processes("kv_precision_check", ("tensorrt", "pytorch"))))
    for backend, fits in results.items():
        planned, sixteen = fits["as_planned"], fits["sixteen_bit_kv"]
        print(backend, planned["loss"], sixteen["loss"], planned["median_abs_pct_error"], sixteen["median_abs_pct_error"])
        assert sixteen["loss"] > 5 * planned["loss"], backend
        assert sixteen["median_abs_pct_error"] > 2 * planned["median_abs_pct_error"], backend


def test_a_row_may_name_its_own_kv_cache() -> None:
    row = next(r for r in published_rows("pytorch") if r["precision"] == "FP8")
    model = P.published_model(row["model"])
    assert P.published_scenario(model, row).kv.name == "fp8"
    assert P.published_scenario(model, dict(row, kv_cache="auto")).kv.name != "fp8"


def test_fit_script_writes_json_csv_and_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report needs no AIConfigurator: its side-by-side comes from the recorded predictions."""
    monkeypatch.setenv("PATH", "/nonexistent")
    module = script_module()
    assert module.main(["--backend", "tensorrt", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "plan_vs_published.json").read_text())
    part = report["backends"]["tensorrt"]
    assert part["constants"] == efficiency_for("tensorrt").as_dict() and len(part["rows"]) == len(published_rows("tensorrt"))
    aic = part["aiconfigurator"]
    assert aic["source"] == "pipeline/data/aiconfigurator_predictions.tsv" and aic["rows_estimated"] > 0
    assert {e["gpu"] for e in aic["per_gpu"]} >= {"h100-sxm", "h200"}
    assert (tmp_path / "plan_vs_published_folds.csv").read_text().startswith("backend,held_out,value")
    assert (tmp_path / "plan_vs_aiconfigurator.csv").read_text().startswith("backend,gpu,rows,aiconfigurator_median_abs_pct_error")
    assert report["nim_serving"]["table"] == "pipeline/data/nim_published_serving.tsv"
    for png in ("plan_vs_published.png", "plan_vs_aiconfigurator.png", "plan_vs_nim.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recorded_aiconfigurator_table_names_its_provenance() -> None:
    """Every recorded row names AIConfigurator's version, the command and the date (and, where it answered, its database),
    and matches a published row; the 70B FP8 rows on H100 and H200, the L40S rows, the MoE rows, the rows of the GPUs
    outside the fit, 0.20's runs and the runs with pipeline stages are there."""
    aic = script_module("plan_vs_aiconfigurator")
    recorded = aic.recorded_predictions()
    dep = {aic._key(r) for r in P.dep_rows() + P.mla_rows()}  # DeepSeek R1 runs DEP too
    published = {aic._key(r) for r in published_rows() + P.more_model_rows() + P.more_gpu_rows() + P.earlier_release_rows()}
    staged = {aic._key(r) for r in P.pp_rows()}
    assert recorded and set(recorded) <= published | dep | staged and not published & dep  # a DEP row's key is its own
    assert staged <= set(recorded) and not staged & (published | dep)  # every run with stages, keyed by its pp
    for key, row in recorded.items():
        # a row AIConfigurator refused (its own OOM check) has no answer, so no database version that answered
        assert all(row[column] for column in aic.PROVENANCE if column != "database_version"), row
        assert row["aiconfigurator_version"] == "0.12.0" and row["command"].startswith("aiconfigurator cli estimate ")
        dep_row = key in dep or (key in staged and P.published_model(row["model"]).moe_layer_count)
        parallel = (f"--tp-size 1 --attention-dp-size {row['tp']} --moe-tp-size 1 --moe-ep-size {row['tp']} " if dep_row
                    else f"--tp-size {row['tp']} ") + (f"--pp-size {row['pp']} " if key in staged else "")
        assert f"--batch-size {row['batch']} " in row["command"] and parallel in row["command"]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"])
        if row["status"].startswith("ok"):
            assert float(row["aiconfigurator_tokens_per_s"]) > 0 and row["database_version"]
    ok = [r for r in recorded.values() if r["status"].startswith("ok")]
    for gpu in ("h100-sxm", "h200"):
        assert any(r["gpu"] == gpu and "70b" in r["model"] and r["precision"] == "FP8" for r in ok)
    assert any(r["gpu"] == "l40s" for r in ok)
    moe = [r for k, r in recorded.items() if r["model"].startswith(("mixtral", "qwen3", "llama-4")) and k not in dep | staged]
    assert moe and all(f"--moe-tp-size {r['tp']} --moe-ep-size 1 " in r["command"] for r in moe)
    # the experts at the row's precision (AIConfigurator's default without a quantization_config would be BF16)
    assert all(f"--moe-quant-mode {'fp8' if r['precision'] == 'FP8' else 'nvfp4'} " in r["command"]
               for r in recorded.values() if r["model"] in {k[1] for k in dep} | {"mixtral-8x7b", "qwen3-30b-a3b"}
               and r["precision"] in ("FP8", "FP4"))
    assert {"gb200", "rtx-pro-6000"} <= {r["gpu"] for r in ok}  # the GPUs no fit sees
    assert all(aic._key(r) in recorded for r in P.earlier_release_rows())  # 0.20's runs, each asked or shared with a later page


def test_comparison_is_computed_from_the_recorded_table() -> None:
    """annotate() takes AIConfigurator's figure from the table (change the table, the comparison follows), and the
    per-GPU side by side is the median and worst of those errors."""
    aic = script_module("plan_vs_aiconfigurator")
    text = (Path(__file__).resolve().parents[3] / "pipeline" / "data" / aic.TABLE).read_text(encoding="utf-8")
    recorded = aic.recorded_predictions(text)
    key, entry = next((k, r) for k, r in recorded.items() if r["status"] == "ok")
    row = next(r for r in published_rows() if aic._key(r) == key)
    comparison = P.compare_published(None, [row])
    summary = aic.annotate(comparison, recorded)
    published = float(row["tokens_per_s"])
    expected = round(100 * (float(entry["aiconfigurator_tokens_per_s"]) - published) / published, 2)
    assert summary["rows_estimated"] == 1 and comparison[0]["aiconfigurator_error_pct"] == expected
    doubled = {key: {**entry, "aiconfigurator_tokens_per_s": str(2 * float(entry["aiconfigurator_tokens_per_s"]))}}
    again = P.compare_published(None, [row])
    aic.annotate(again, doubled)
    assert again[0]["aiconfigurator_tokens_per_s"] == 2 * comparison[0]["aiconfigurator_tokens_per_s"]
    side = aic.side_by_side(comparison, {key: 3.0})
    assert side == [{"gpu": row["gpu"], "rows": 1, "aiconfigurator_median_abs_pct_error": abs(expected),
                     "aiconfigurator_max_abs_pct_error": abs(expected),
                     "ours_in_sample_median_abs_pct_error": abs(comparison[0]["error_pct"]),
                     "ours_in_sample_max_abs_pct_error": abs(comparison[0]["error_pct"]),
                     "ours_gpu_held_out_median_abs_pct_error": 3.0, "ours_gpu_held_out_max_abs_pct_error": 3.0}]
    assert aic.annotate(P.compare_published(None, [row]), {})["rows_estimated"] == 0


# Models outside the fit (pipeline/data/trtllm_published_throughput_more_models.tsv, scripts/plan_vs_more_models.py): the
# figures README quotes. Mistral 7B (engines) and the PyTorch backend's MoE rows are never fitted; Mixtral fits the engines'
# MoE constant alone, and its figure holds one Mixtral out. As if dense (the constant at 1.0), Mixtral came out 13.8% fast in
# the median and 47.8% at worst. Before the runs were replayed iteration by iteration (planner/offline.py): Mistral 3.5/8.1,
# Qwen3-30B-A3B 14.1/47.4, Llama 4 Scout 12.4/23.6, GPT-OSS 20B 25.5/59.3, 120B 20.9/32.5, Mixtral held out 5.5/21.3.
# Before the 1.2-dev page's 1000/1000 rows got their run's 3000 requests: Qwen3-30B-A3B 5.4/33.6, Scout 10.8/21.8, GPT-OSS
# 20B 25.3/51.9, 120B 20.5/31.1. Before the PyTorch backend's fit added the silicon serving rows' TPOT and read the KV
# cache at silicon's figures (rates.py): Qwen3-30B-A3B 3.8/32.8, Scout 10.9/21.8, GPT-OSS 20B 25.3/51.9, 120B 20.9/31.1.
NEVER_FITTED = {("tensorrt", "mistral-7b"): (3.3, 8.0), ("pytorch", "qwen3-30b-a3b"): (4.9, 38.2),
                ("pytorch", "llama-4-scout"): (11.4, 21.6), ("pytorch", "gpt-oss-20b"): (16.7, 34.5),
                ("pytorch", "gpt-oss-120b"): (17.7, 27.1)}
# the PyTorch rows with the routed experts at the dense GEMM rate instead of silicon's MoE layer timings
PYTORCH_MOE_AS_DENSE = {"qwen3-30b-a3b": (47.9, 188.8), "llama-4-scout": (36.0, 56.2), "gpt-oss-20b": (32.3, 116.4),
                        "gpt-oss-120b": (20.0, 36.5)}
# AIConfigurator's recorded estimates of the never-fitted rows it answers, per model and GPU: (its median, worst |error| %),
# (ours on the same rows). Llama 4 Scout: it refused every row (OOM).
NEVER_FITTED_AIC = {("gpt-oss-20b", "b200"): ((53.6, 57.5), (21.2, 30.8)), ("gpt-oss-20b", "h200"): ((9.3, 30.6), (11.3, 27.4)),
                    ("gpt-oss-20b", "h100-sxm"): ((7.7, 40.1), (12.3, 34.5)), ("gpt-oss-120b", "h200"): ((17.2, 24.0), (17.7, 27.1)),
                    ("qwen3-30b-a3b", "b200"): ((10.6, 76.7), (4.9, 38.2)), ("llama-4-scout", "b200"): ((11.1, 80.4), (11.4, 21.6))}
MIXTRAL_MODEL_HELD_OUT = (4.9, 21.9)


def test_more_models_table_names_its_source_and_every_model_its_shapes() -> None:
    rows = P.more_model_rows()
    assert {r["model"] for r in rows} == {"mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "llama-4-scout",
                                          "gpt-oss-20b", "gpt-oss-120b"}
    assert len(rows) == 227 and not {r["model"] for r in rows} & {r["model"] for r in published_rows()}  # no fit saw them
    pages = {"0.17": ("tensorrt", "258c7540c03517def55d9a5aadfa9288af474e1b", range(107, 161), "total"),
             "1.0": ("pytorch", "00f37686aa854010d68bcbd0f4ab000221541ca6", [*range(65, 75), *range(149, 159)], "total"),
             "1.2-dev": ("pytorch", "03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d", [*range(121, 127), *range(138, 144), *range(239, 245)],
                         "per_gpu")}
    for r in rows:
        backend, commit, lines, unit = pages[r["trtllm_version"]]
        assert r["backend"] == backend and r["commit"] == commit and int(r["line"]) in lines and r["published_unit"] == unit
        assert r["tokens_per_s"] == str(int(r["published_value"]) * int(r["tp"]) if unit == "per_gpu" else r["published_value"])
        assert (r["precision"] == "MXFP4") == r["model"].startswith("gpt-oss")  # OpenAI's checkpoints as published
    # the parameter counts their makers publish: 7.3B, 46.7B, 141B, 30.5B, 109B (107.8B without the vision encoder), 21B, 117B
    for model, count in (("mistral-7b", 7.24e9), ("mixtral-8x7b", 46.7e9), ("mixtral-8x22b", 140.6e9),
                         ("qwen3-30b-a3b", 30.5e9), ("llama-4-scout", 107.8e9), ("gpt-oss-20b", 20.9e9), ("gpt-oss-120b", 116.8e9)):
        assert P.published_model(model).param_count == pytest.approx(count, rel=0.01), model


def test_moe_constant_slows_only_the_routed_experts_math() -> None:
    """A dense model's prediction does not depend on moe_expert_compute; an MoE's compute-bound prefill slows by at most
    the experts' share of its FLOPs."""
    from dataclasses import replace

    eff = efficiency_for("tensorrt")
    dense_row = next(r for r in published_rows("tensorrt") if r["model"] == "llama-3.1-8b")
    a, b = (P.compare_published(None, [dense_row], efficiency=replace(eff, moe_expert_compute=share))[0] for share in (1.0, 0.5))
    assert a["predicted_tokens_per_s"] == b["predicted_tokens_per_s"]
    mixtral = P.published_model("mixtral-8x7b")
    assert mixtral.routed_active_params_per_token == 32 * 2 * 3 * 4096 * 14336
    scenario = P.Scenario(mixtral, "h100-sxm", "fp8", "fp8", 1, 2048, 128)
    load = P.StepLoad(decode=0, decode_context=0, prefill_tokens=8192, prefill_context=1024)
    full, half = (P.step_time(scenario, load, replace(eff, moe_expert_compute=share)).gemm_s for share in (1.0, 0.5))
    share = mixtral.routed_active_params_per_token / mixtral.active_params_per_token
    assert full < half <= full * (1 + share) * 1.001


def test_models_outside_the_fit_are_what_the_readme_quotes() -> None:
    """The never-fitted models with their backend's shipped constants; each Mixtral predicted with the MoE constant fitted
    on the other; the shipped constant is the one fitted on both; the planner's MoE caveats quote these figures."""
    from pipeline.planner.caveats import accuracy_caveats

    report = script_module("plan_vs_more_models").more_models_report(fit=True)
    never = {(m["backend"], m["model"]): m["summary"] for m in report["never_fitted"]}
    assert set(never) == set(NEVER_FITTED)
    for key, figures in NEVER_FITTED.items():
        assert (never[key]["median_abs_pct_error"], never[key]["max_abs_pct_error"]) == pytest.approx(figures, abs=0.1), key
    as_dense = {m["model"]: m["as_dense"] for m in report["never_fitted"] if "as_dense" in m}
    assert set(as_dense) == set(PYTORCH_MOE_AS_DENSE)
    for model, figures in PYTORCH_MOE_AS_DENSE.items():
        assert (as_dense[model]["median_abs_pct_error"], as_dense[model]["max_abs_pct_error"]) == pytest.approx(figures, abs=0.1)
    beside = {(m["model"], e["gpu"]): e for m in report["never_fitted"] for e in m["aiconfigurator"]}
    assert set(beside) == set(NEVER_FITTED_AIC)
    for key, (theirs, ours) in NEVER_FITTED_AIC.items():
        assert_beside(beside[key], theirs, ours, key)
    moe = report["moe"]
    assert moe["moe_expert_compute"] == pytest.approx(efficiency_for("tensorrt").moe_expert_compute, abs=0.005)
    pooled = moe["cross_validated"]["model"]
    assert pooled["rows"] == 144
    assert (pooled["median_abs_pct_error"], pooled["max_abs_pct_error"]) == pytest.approx(MIXTRAL_MODEL_HELD_OUT, abs=0.3)
    assert moe["as_dense"]["median_abs_pct_error"] > 2 * pooled["median_abs_pct_error"]  # what the constant buys
    for fold in moe["folds"]:  # a fold's constant never saw its held-out rows
        assert fold["train_rows"] + fold["rows"] == 144 and 0.3 < fold["moe_expert_compute"] < 1.0
    mixtral = P.published_model("mixtral-8x7b")
    engines, = accuracy_caveats(mixtral, "tensorrt", efficiency_for("tensorrt"))
    assert f"{efficiency_for('tensorrt').moe_expert_compute} of the dense GEMM rate" in engines
    assert f"{pooled['median_abs_pct_error']:.1f}% median, {pooled['max_abs_pct_error']:.0f}% worst" in engines
    pytorch = efficiency_for("pytorch")
    measured, = accuracy_caveats(mixtral, "pytorch", pytorch, moe_measured=True)
    unmeasured, = accuracy_caveats(mixtral, "pytorch", pytorch, moe_measured=False)
    either, = accuracy_caveats(mixtral, "pytorch", pytorch)
    qwen, scout = never[("pytorch", "qwen3-30b-a3b")], never[("pytorch", "llama-4-scout")]
    assert f"{qwen['median_abs_pct_error']:.1f}% and {scout['median_abs_pct_error']:.1f}% off in the median" in measured
    assert f"{qwen['max_abs_pct_error']:.0f}% and {scout['max_abs_pct_error']:.0f}% at worst" in measured
    dense_figures = f"+{as_dense['qwen3-30b-a3b']['median_abs_pct_error']:.0f}% and +{as_dense['llama-4-scout']['median_abs_pct_error']:.0f}%"
    assert dense_figures in unmeasured and dense_figures in either and either.startswith(measured)
    assert accuracy_caveats(P.published_model("llama-3.1-8b"), "pytorch", pytorch) == []
    gpt_oss, = accuracy_caveats(P.published_model("gpt-oss-20b"), "pytorch", pytorch, moe_measured=True)
    small, large = never[("pytorch", "gpt-oss-20b")], never[("pytorch", "gpt-oss-120b")]
    assert f"{small['median_abs_pct_error']:.1f}% and {large['median_abs_pct_error']:.1f}% off in the median" in gpt_oss
    assert f"{small['max_abs_pct_error']:.0f}% and {large['max_abs_pct_error']:.0f}% at worst" in gpt_oss
    aic_rows = [r for m in report["never_fitted"] if m["model"].startswith("gpt-oss") for r in m["rows"] if "aiconfigurator_error_pct" in r]
    theirs = [{"error_pct": r["aiconfigurator_error_pct"]} for r in aic_rows]
    assert len(aic_rows) == 21 and f"{P.median_abs_pct_error(theirs):.0f}% in the median, {max(abs(r['error_pct']) for r in theirs):.0f}% at worst" in gpt_oss


# GPUs outside the fit (pipeline/data/trtllm_published_throughput_more_gpus.tsv; the GPUs' figures are
# pipeline/data/gpus_added.tsv's): the PyTorch backend's shipped constants, never fitted to any of them, per GPU, model and
# page (median, worst |error| %), and AIConfigurator's recorded estimates of the same rows (None: it refused every row, OOM).
# The 1.2-dev rows were added after the 1.0 rows had been predicted and reported, with nothing in the planner changed.
MORE_GPUS = {
    ("gb200", "llama-3.3-70b", "1.0"): (4.3, 13.9, (7.5, 50.9)), ("gb200", "llama-3.3-70b", "1.2-dev"): (0.9, 4.3, (4.5, 11.5)),
    ("gb200", "llama-3.1-405b", "1.0"): (2.5, 11.5, (8.3, 55.7)),
    ("gb200", "qwen3-30b-a3b", "1.0"): (39.0, 155.0, (52.6, 97.6)), ("gb200", "qwen3-30b-a3b", "1.2-dev"): (7.2, 41.3, (12.2, 40.6)),
    ("gb200", "llama-4-scout", "1.0"): (36.6, 100.7, (44.9, 125.4)),
    ("rtx-pro-6000", "llama-3.3-70b", "1.0"): (7.7, 28.3, (5.3, 30.2)),
    ("rtx-pro-6000", "llama-3.3-70b", "1.2-dev"): (9.8, 10.1, (7.9, 8.2)),
    ("rtx-pro-6000", "qwen3-30b-a3b", "1.0"): (2.7, 15.8, (9.0, 78.6)),
    ("rtx-pro-6000", "qwen3-30b-a3b", "1.2-dev"): (7.5, 13.5, (10.4, 26.1)),
    ("gb200", "gpt-oss-20b", "1.2-dev"): (28.0, 36.0, (54.4, 57.7)), ("gb200", "gpt-oss-120b", "1.2-dev"): (15.9, 19.7, (63.8, 75.9)),
    # GH200 (in pipeline/data/gpus.json before these rows were added; AIConfigurator 0.12 has no GH200 system): 0.17's engines,
    # 0.21's PyTorch backend
    ("gh200", "llama-3.1-8b", "0.17"): (6.6, 9.6, None), ("gh200", "llama-3.1-70b", "0.17"): (6.2, 10.8, None),
    ("gh200", "mistral-7b", "0.17"): (8.0, 11.7, None), ("gh200", "mixtral-8x7b", "0.17"): (9.1, 21.2, None),
    ("gh200", "llama-3.1-8b", "0.21"): (4.3, 12.1, None),
}


def test_more_gpus_table_names_its_source_and_no_fit_sees_it() -> None:
    from pipeline.core.gpus import gpu_table
    from pipeline.data import packaged_fact_rows

    rows = P.more_gpu_rows()
    added = {r["key"] for r in packaged_fact_rows("gpus_added.tsv")}
    assert added == {"gb200", "rtx-pro-6000"} and len(rows) == 136 and {r["gpu"] for r in rows} == added | {"gh200"}
    fitted = [*published_rows(), *P.more_model_rows()]
    assert not {r["gpu"] for r in rows} & {r["gpu"] for r in fitted}  # no fit of either backend ever sees these GPUs
    gh200 = [r for r in rows if r["gpu"] == "gh200"]
    assert {(r["trtllm_version"], r["backend"]) for r in gh200} == {("0.17", "tensorrt"), ("0.21", "pytorch")}
    same_line = {(r["model"], r["tp"], r["isl"], r["osl"]): r["line"] for r in fitted if (r["trtllm_version"], r["gpu"]) == ("0.17", "h200")}
    for r in gh200:  # 0.17's GH200 column sits on the H200 column's lines; 0.21's 8B table starts at line 97, 1024/2048 left out
        assert r["precision"] == "FP8" and r["tp"] == "1" and r["tokens_per_s"] == r["published_value"]
        if r["trtllm_version"] == "0.17":
            assert r["line"] == same_line[(r["model"], "1", r["isl"], r["osl"])] and r["commit"] == "258c7540c03517def55d9a5aadfa9288af474e1b"
        else:
            assert 97 <= int(r["line"]) <= 107 and r["commit"] == "v0.21.0" and r["isl"] != "1024"
    rows = [r for r in rows if r["gpu"] != "gh200"]
    first_line = {  # each table's first row on its page: the GB200 column's, then the RTX PRO 6000 tables' one-GPU column
        ("1.0", "gb200"): {"llama-4-scout": 65, "llama-3.3-70b": 92, "qwen3-30b-a3b": 149, "llama-3.1-405b": 206},
        ("1.0", "rtx-pro-6000"): {"llama-3.3-70b": 106, "qwen3-30b-a3b": 163},
        ("1.2-dev", "gb200"): {"llama-3.3-70b": 155, "qwen3-30b-a3b": 239, "gpt-oss-120b": 121, "gpt-oss-20b": 138},
        ("1.2-dev", "rtx-pro-6000"): {"llama-3.3-70b": 173, "qwen3-30b-a3b": 258},
    }
    pages = {"1.0": ("00f37686aa854010d68bcbd0f4ab000221541ca6", "total"), "1.2-dev": ("03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d", "per_gpu")}
    for r in rows:
        first = first_line[(r["trtllm_version"], r["gpu"])][r["model"]]
        assert first <= int(r["line"]) < first + 10 and r["pp"] == "1" and r["backend"] == "pytorch"
        assert r["precision"] == ("MXFP4" if r["model"].startswith("gpt-oss") else "FP4")
        assert (r["commit"], r["published_unit"]) == pages[r["trtllm_version"]] and r["tp"] in ("1", "4")
        per_gpu = r["published_unit"] == "per_gpu"  # 1.0 publishes the TP group's total, 1.2-dev per GPU
        assert r["tokens_per_s"] == str(int(r["published_value"]) * (int(r["tp"]) if per_gpu else 1))
    for key in added:
        assert gpu_table()[key].device_memory_gib  # the memory the runtime allocates from, as nvidia-smi reports it


def test_gpus_outside_the_fit_are_what_the_readme_quotes() -> None:
    """Each new GPU's rows with the PyTorch backend's shipped constants; `pipeline plan` quotes these figures for them."""
    from pipeline.planner.caveats import gpu_caveats

    report = script_module("plan_vs_more_models").more_gpus_report()
    groups = {(g["gpu"], g["model"], g["trtllm_version"]): g for g in report["groups"]}
    assert set(groups) == set(MORE_GPUS)
    for key, (median, worst, aic) in MORE_GPUS.items():
        summary = groups[key]["summary"]
        assert (summary["median_abs_pct_error"], summary["max_abs_pct_error"]) == pytest.approx((median, worst), abs=0.1), key
        if aic is None:
            assert "aiconfigurator" not in groups[key]
        else:
            theirs = groups[key]["aiconfigurator"]
            assert (theirs["aiconfigurator_median_abs_pct_error"], theirs["aiconfigurator_max_abs_pct_error"]) == pytest.approx(aic, abs=0.1)
    assert groups[("gb200", "qwen3-30b-a3b", "1.0")]["published_over_b200"] == [0.61, 1.09]  # GB200's MoE runs, against B200's
    assert [r["isl"] for r in groups[("gb200", "qwen3-30b-a3b", "1.0")]["rows"] if r["error_pct"] <= 0] == [20000]  # fast but one
    pooled = {(p["gpu"], p["model"]): p["summary"] for p in report["pooled"] if p["backend"] == "pytorch"}  # what the caveats quote

    def quoted(gpu: str, *models: str) -> tuple[str, str]:
        s = [pooled[(gpu, m)] for m in models]
        return (f"{s[0]['median_abs_pct_error']:.1f}% and {s[1]['median_abs_pct_error']:.1f}%",
                f"{s[0]['max_abs_pct_error']:.0f}% and {s[1]['max_abs_pct_error']:.0f}%")

    gb200, = gpu_caveats("gb200", "pytorch")
    median, _ = quoted("gb200", "llama-3.3-70b", "llama-3.1-405b")
    worst = " and ".join(f"{pooled[('gb200', m)]['max_abs_pct_error']:.{1 if pooled[('gb200', m)]['max_abs_pct_error'] < 10 else 0}f}%"
                         for m in ("llama-3.3-70b", "llama-3.1-405b"))
    assert median in gb200 and f"{worst} worst" in gb200 and "MoE" not in gb200
    gb200_moe, = gpu_caveats("gb200", "pytorch", moe=True)
    qwen, scout = (pooled[("gb200", m)]["median_abs_pct_error"] for m in ("qwen3-30b-a3b", "llama-4-scout"))
    lowest = min(g["published_over_b200"][0] for k, g in groups.items() if k[:2] == ("gb200", "qwen3-30b-a3b"))
    assert gb200_moe.startswith(gb200) and f"{qwen:.0f}% and {scout:.0f}%" in gb200_moe and f"{lowest:.2f}x" in gb200_moe
    rtx, = gpu_caveats("rtx-pro-6000", "pytorch")
    median, worst = quoted("rtx-pro-6000", "llama-3.3-70b", "qwen3-30b-a3b")
    assert median in rtx and worst in rtx
    assert gpu_caveats("h100-sxm", "pytorch") == gpu_caveats("a100-80gb", "tensorrt") == gpu_caveats("cpu", "pytorch") == []
    unchecked, = gpu_caveats("b200", "tensorrt")  # 0.17's engine pages have no B200 column
    assert "no figure NVIDIA published for TensorRT engines on this GPU" in unchecked
    assert gpu_caveats("l4", "pytorch")[0].startswith("l4: no figure NVIDIA published for the PyTorch backend")
    engines = [r for g in report["groups"] if (g["gpu"], g["backend"]) == ("gh200", "tensorrt") for r in g["rows"]]
    dense = P.error_summary([r for r in engines if r["model"] != "mixtral-8x7b"])
    faster = sum(1 for r in engines if r["model"] != "mixtral-8x7b" and r["error_pct"] < 0)
    mixtral = groups[("gh200", "mixtral-8x7b", "0.17")]["summary"]
    gh200_engines, = gpu_caveats("gh200", "tensorrt")
    assert (f"{dense['median_abs_pct_error']:.1f}% off in the median and {dense['max_abs_pct_error']:.0f}% at worst, {faster} of "
            f"{dense['rows']} faster than planned, and Mixtral 8x7B {mixtral['median_abs_pct_error']:.1f}% "
            f"({mixtral['max_abs_pct_error']:.0f}% worst)") in gh200_engines
    pytorch = groups[("gh200", "llama-3.1-8b", "0.21")]["summary"]
    gh200_pytorch, = gpu_caveats("gh200", "pytorch")
    assert f"{pytorch['median_abs_pct_error']:.1f}% off in the median, {pytorch['max_abs_pct_error']:.0f}% at worst" in gh200_pytorch


def test_plan_and_search_carry_the_moe_caveat(tmp_path: Path) -> None:
    """`pipeline plan` (one configuration and --slo) says how far to trust an MoE prediction; a dense model gets none."""
    from pipeline.planner.entry import PlanSpec, plan
    from pipeline.planner.prices import load_prices
    from pipeline.planner.search import SearchSpec, search
    from pipeline.planner.slo import parse_slo

    def config(name: str) -> Path:
        raw = json.loads((Path(P.__file__).parents[1] / "data" / "published_models" / f"{name}.json").read_text())
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(raw))
        return folder

    mixtral, llama = config("mixtral-8x7b"), config("llama-3.1-8b")
    for backend in ("tensorrt", "pytorch"):
        result = plan(PlanSpec(model=mixtral, gpu="h100", quant="fp8", tp=2, backend=backend))
        assert result.caveats[0].startswith("mixture of experts")
        # and, for the PyTorch backend, what the silicon-measured serving runs say of its TPOT
        assert [c[:27] for c in result.caveats[1:]] == (["TPOT on the PyTorch backend"] if backend == "pytorch" else [])
    # silicon timed Mixtral's shape on H100 in FP8 at expert TP 2; on L40S only in BF16
    timed = plan(PlanSpec(model=mixtral, gpu="h100", quant="fp8", tp=2, backend="pytorch")).caveats[0]
    untimed = plan(PlanSpec(model=mixtral, gpu="l40s", quant="fp8", tp=4, backend="pytorch")).caveats[0]
    assert "measured on silicon for this shape" in timed and "no silicon timing of this MoE shape on this GPU" in untimed
    assert plan(PlanSpec(model=llama, gpu="h100", quant="fp8")).caveats == []
    found = search(SearchSpec(model=mixtral, slo=parse_slo("tpot_p99_ms=50"), isl=1024, osl=128, gpus=["h100"], quants=["fp8"],
                              tps=[2]), load_prices(None, ()))
    assert found.caveats and "Mixtral" in found.caveats[0]


# The DEP rows (pipeline/data/trtllm_published_throughput_dep.tsv; never fitted), per model, GPU and DEP size: median, worst
# |error| % and whether silicon timed those experts at that expert parallelism on that GPU (True), or the GPU whose timing
# was carried over (planner/moe_timing.py).
# Before the gather and scatter took NCCL's measured collectives (they were priced as one custom all-reduce of all the
# tokens): where silicon timed the experts 9.3 / 48.2. Before the carrying over, the two groups it serves ran at the dense
# GEMM rate: GPT-OSS 120B on H100 112.1 / 178.9, Maverick on H200 77.1 / 105.1.
DEP = {
    ("gpt-oss-120b", "b200", 2): (27.8, 32.2, True), ("gpt-oss-120b", "h100-sxm", 4): (20.8, 37.4, "h200"),
    ("llama-4-maverick", "b200", 4): (4.7, 13.6, True), ("llama-4-maverick", "gb200", 4): (9.6, 19.0, True),
    ("llama-4-maverick", "h200", 8): (41.6, 100.8, "b200"),
    ("qwen3-235b-a22b", "b200", 4): (11.4, 17.3, True), ("qwen3-235b-a22b", "gb200", 4): (6.5, 36.9, True),
    ("qwen3-235b-a22b", "h100-sxm", 8): (32.1, 36.0, True), ("qwen3-235b-a22b", "h200", 4): (15.7, 17.4, True),
    ("qwen3-235b-a22b", "rtx-pro-6000", 8): (5.5, 6.7, True),
    ("qwen3-30b-a3b", "rtx-pro-6000", 2): (4.3, 6.9, True), ("qwen3-30b-a3b", "rtx-pro-6000", 8): (4.0, 23.6, True),
}
DEP_TIMED = (9.9, 36.9)
DEP_CARRIED = (36.9, 100.8)
# AIConfigurator's recorded estimates of the DEP rows per GPU (experts at the row's precision): its median / worst beside ours
DEP_AIC = {"b200": ((21.2, 56.4), (10.5, 32.2)), "gb200": ((9.6, 35.1), (7.9, 36.9)), "h100-sxm": ((23.3, 34.7), (31.7, 37.4)),
           "h200": ((29.5, 161.6), (17.4, 100.8)), "rtx-pro-6000": ((17.4, 27.2), (4.7, 23.6))}


def test_hoppers_fast_dep_rows_are_as_fast_in_aiconfigurator_at_the_same_batch() -> None:
    """Where AIConfigurator priced the planner's own batch, it is as fast or faster than the planner on every Hopper DEP
    group (the README quotes the figures): the published Hopper DEP runs' shortfall is outside both models' arithmetic."""
    report = script_module("plan_vs_more_models").dep_report()
    same = {(g["model"], g["gpu"], g["tp"]): g["against_aiconfigurator_same_batch"]["mean_signed_pct_error"]
            for g in report["groups"] if "against_aiconfigurator_same_batch" in g}
    hopper = {("qwen3-235b-a22b", "h200", 4): -7.3, ("qwen3-235b-a22b", "h100-sxm", 8): -1.8,
              ("llama-4-maverick", "h200", 8): -6.7, ("gpt-oss-120b", "h100-sxm", 4): -1.6}
    for key, figure in hopper.items():
        assert same[key] == pytest.approx(figure, abs=0.1) and same[key] <= 0, key
    assert [same[(m, "gb200", 4)] for m in ("llama-4-maverick", "qwen3-235b-a22b")] == pytest.approx([7.6, -2.9], abs=0.1)


def test_dep_rows_are_what_the_caveat_quotes() -> None:
    from pipeline.planner.caveats import accuracy_caveats

    report = script_module("plan_vs_more_models").dep_report()
    groups = {(g["model"], g["gpu"], g["tp"]): g for g in report["groups"]}
    assert set(groups) == set(DEP)
    for key, (median, worst, timing) in DEP.items():
        summary = groups[key]["summary"]
        assert (summary["median_abs_pct_error"], summary["max_abs_pct_error"]) == pytest.approx((median, worst), abs=0.1), key
        assert groups[key]["experts_timed_on_silicon"] is (timing is True), key
        assert groups[key]["experts_carried_from"] == (None if timing is True else timing), key
    per_gpu = {e["gpu"]: e for e in report["aiconfigurator"]["per_gpu"]}
    assert set(per_gpu) == set(DEP_AIC)
    for gpu, (theirs, ours) in DEP_AIC.items():
        assert_beside(per_gpu[gpu], theirs, ours, gpu)
    timed = report["timed_on_silicon"]
    assert (timed["median_abs_pct_error"], timed["max_abs_pct_error"]) == pytest.approx(DEP_TIMED, abs=0.1)
    carried = report["carried_over"]
    assert (carried["median_abs_pct_error"], carried["max_abs_pct_error"]) == pytest.approx(DEP_CARRIED, abs=0.1)
    caveat, = accuracy_caveats(P.published_model("qwen3-235b-a22b"), "pytorch", efficiency_for("pytorch"), moe_measured=True,
                               attention_dp=True)
    assert f"{DEP_TIMED[0]:.1f}% off in the median and {DEP_TIMED[1]:.0f}% at worst" in caveat
    blackwell = [groups[(m, g, 4)]["summary"]["median_abs_pct_error"] for m in ("llama-4-maverick", "qwen3-235b-a22b")
                 for g in ("b200", "gb200")]
    assert f"{min(blackwell):.1f}-{max(blackwell):.1f}% (median per GPU)" in caveat
    hopper = [groups[("qwen3-235b-a22b", g, tp)] for g, tp in (("h200", 4), ("h100-sxm", 8))]
    assert all(g["mean_signed_pct_error"] > 0 for g in hopper)  # fast, as the caveat says
    assert " and ".join(f"{g['summary']['median_abs_pct_error']:.0f}%" for g in hopper) + " fast" in caveat
    assert f"GPT-OSS 120B {groups[('gpt-oss-120b', 'b200', 2)]['summary']['median_abs_pct_error']:.0f}% fast" in caveat

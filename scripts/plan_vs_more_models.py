"""Each backend's constants on models its fit never sees (pipeline/data/trtllm_published_throughput_more_models.tsv:
TensorRT-LLM 0.17's engine rows of Mistral 7B, Mixtral 8x7B and Mixtral 8x22B; 1.0's PyTorch-backend rows of Qwen3-30B-A3B
and Llama 4 Scout on B200 at TP 1), and on GPUs its fit never sees (pipeline/data/trtllm_published_throughput_more_gpus.tsv:
1.0's PyTorch-backend rows on GB200 and the RTX PRO 6000 Blackwell Server Edition), and MoE runs with attention data
parallelism (pipeline/data/trtllm_published_throughput_dep.tsv: the 1.2-dev page's DEP columns). scripts/plan_vs_published.py calls it;
it is a module of its own because its procedure differs from the main table's:

- Mistral 7B, the PyTorch rows, the new GPUs' rows and the DEP rows fit nothing: each is predicted with its backend's shipped constants (the PyTorch
  backend times an MoE's routed experts with NVIDIA's silicon MoE timings; the report gives the dense-rate figure beside).
- Mixtral rows fit one engine constant and nothing else: the share of the dense GEMM rate an MoE's routed experts' math
  reaches (rates.Efficiency.moe_expert_compute; the dense constants stay as the main table fitted them). The figure to
  quote holds one Mixtral out (fit on the other) and then one GPU out, as the main table's folds do.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pipeline import planner as P
from pipeline.planner.moe_timing import moe_key, moe_timing_for
from plan_vs_aiconfigurator import SYSTEMS as AIC_SYSTEMS, _key, annotate, same_batch, side_by_side

MOE_PREFIX = "mixtral"  # the rows that fit the engines' MoE constant; every other row is never fitted
MOE_BOUNDS = (0.3, 1.0)  # a share of the dense rate; set before the fit, and no fold reaches either end (0.63-0.69)


def fit_moe(rows: list[dict[str, str]], base: P.Efficiency) -> P.Efficiency:
    """`base` with moe_expert_compute fitted on `rows` (bounded scalar minimisation of the squared log ratios)."""
    from scipy.optimize import minimize_scalar

    row_loss = P.loss_over(rows)
    best = minimize_scalar(lambda share: row_loss(replace(base, moe_expert_compute=share)), bounds=MOE_BOUNDS,
                           method="bounded", options={"xatol": 1e-4})
    return replace(base, moe_expert_compute=round(float(best.x), 3))


def moe_folds(rows: list[dict[str, str]], base: P.Efficiency) -> list[dict[str, Any]]:
    """Hold out each MoE model, then each GPU: fit the MoE constant on the rest, predict the held-out rows."""
    folds = []
    for by in ("model", "gpu"):
        for held_out in sorted({r[by] for r in rows}):
            train = [r for r in rows if r[by] != held_out]
            eff = fit_moe(train, base)
            comparison = P.compare_published(None, [r for r in rows if r[by] == held_out], efficiency=eff)
            folds.append({"held_out": by, "value": held_out, "train_rows": len(train),
                          "moe_expert_compute": eff.moe_expert_compute, **P.error_summary(comparison), "comparison": comparison})
    return folds


def more_models_report(*, fit: bool = False, folds: bool = True) -> dict[str, Any]:
    """The never-fitted models with their backend's shipped constants; Mixtral as if dense, then in sample (the shipped
    MoE constant, or refitted with `fit`) and, with `folds`, held out; AIConfigurator's recorded estimates beside Mixtral."""
    shipped = P.efficiency_for("tensorrt")
    moe_rows = P.more_model_rows(MOE_PREFIX)
    never = P.compare_published(None, [r for r in P.more_model_rows() if not r["model"].startswith(MOE_PREFIX)])
    annotate(never)
    eff = fit_moe(moe_rows, shipped) if fit else shipped
    moe = P.compare_published(None, moe_rows, efficiency=eff)
    as_dense = P.compare_published(None, moe_rows, efficiency=replace(shipped, moe_expert_compute=1.0))
    part: dict[str, Any] = {"moe_expert_compute": eff.moe_expert_compute, "fitted_now": fit, "in_sample": P.error_summary(moe),
                            "as_dense": P.error_summary(as_dense), "aiconfigurator": annotate(moe), "rows": moe}
    held_out = None
    if folds:
        part["folds"] = moe_folds(moe_rows, shipped)
        part["cross_validated"] = {by: P.error_summary([r for f in part["folds"] if f["held_out"] == by for r in f["comparison"]])
                                   for by in ("model", "gpu")}
        held_out = {_key(r): r["error_pct"] for f in part["folds"] if f["held_out"] == "gpu" for r in f["comparison"]}
    part["aiconfigurator"]["per_gpu"] = side_by_side(moe, held_out)
    models = sorted({(r["backend"], r["model"]) for r in never})
    return {"table": "pipeline/data/trtllm_published_throughput_more_models.tsv", "more_gpus": more_gpus_report(), "dep": dep_report(),
            "never_fitted": [{"backend": backend, "model": model, "summary": P.error_summary(rows), "rows": rows,
                              **_as_dense(backend, model), "aiconfigurator": side_by_side(rows)}
                             for backend, model in models
                             for rows in [[r for r in never if (r["backend"], r["model"]) == (backend, model)]]],
            "moe": part}


def more_gpus_report() -> dict[str, Any]:
    """The rows of GPUs no fit sees (pipeline/data/trtllm_published_throughput_more_gpus.tsv), each predicted with its
    backend's shipped constants and the GPU's figures (pipeline/data/gpus.json): per GPU, model and page, and per GPU beside
    AIConfigurator's recorded estimates. Where the same page published the same row on B200 (model, TP, precision,
    ISL/OSL), the ratio of the two published figures says how the runs on the new GPU compare with the ones the fit saw."""
    rows = P.compare_published(None, P.more_gpu_rows())
    aic = annotate(rows)
    b200 = {(r["trtllm_version"], r["model"], r["tp"], r["precision"], r["isl"], r["osl"]): float(r["tokens_per_s"])
            for r in [*P.published_rows("pytorch"), *P.more_model_rows()] if r["gpu"] == "b200"}
    groups = []
    for gpu, model, version in sorted({(r["gpu"], r["model"], r["trtllm_version"]) for r in rows}):
        group = [r for r in rows if (r["gpu"], r["model"], r["trtllm_version"]) == (gpu, model, version)]
        ratios = [r["published_tokens_per_s"] / b200[k] for r in group
                  for k in [(r["trtllm_version"], r["model"], str(r["tp"]), r["precision"], str(r["isl"]), str(r["osl"]))] if k in b200]
        beside = side_by_side(group)  # AIConfigurator's figures for the rows it estimates (none where it refused them all)
        groups.append({"backend": group[0]["backend"], "gpu": gpu, "model": model, "trtllm_version": version,
                       "summary": P.error_summary(group),
                       "mean_signed_pct_error": round(mean_signed(group), 2),
                       **({"published_over_b200": [round(min(ratios), 2), round(max(ratios), 2)]} if ratios else {}),
                       **({"aiconfigurator": beside[0]} if beside else {}), "rows": group})
    aic["per_gpu"] = side_by_side(rows)
    pooled = [{"backend": backend, "gpu": gpu, "model": model,  # every page of the backend: what `pipeline plan` quotes
               "summary": P.error_summary([r for r in rows if (r["backend"], r["gpu"], r["model"]) == (backend, gpu, model)])}
              for backend, gpu, model in sorted({(r["backend"], r["gpu"], r["model"]) for r in rows})]
    return {"table": "pipeline/data/trtllm_published_throughput_more_gpus.tsv", "gpus": "pipeline/data/gpus.json",
            "summary": P.error_summary(rows), "groups": groups, "pooled": pooled, "aiconfigurator": aic}


def dep_report() -> dict[str, Any]:
    """The MoE rows run with attention data parallelism and the experts spread over the same GPUs (DEP;
    pipeline/data/trtllm_published_throughput_dep.tsv), never fitted: per model, GPU and DEP size, and whether silicon
    timed that MoE shape at that expert parallelism on that GPU, or which GPU's timing was carried over
    (planner/moe_timing.py; with neither its experts are planned at the dense GEMM rate)."""
    rows = P.compare_published(None, P.dep_rows())
    aic = annotate(rows)
    groups = []
    for model, gpu, tp in sorted({(r["model"], r["gpu"], r["tp"]) for r in rows}):
        group = [r for r in rows if (r["model"], r["gpu"], r["tp"]) == (model, gpu, tp)]
        scenario = P.published_scenario(P.published_model(model), next(r for r in P.dep_rows() if (r["model"], r["gpu"]) == (model, gpu)
                                                                        and int(r["tp"]) == tp))
        timing = moe_timing_for(moe_key(scenario.gpu, scenario.quant, scenario.model, tp, expert_parallel=True))
        beside = side_by_side(group)  # AIConfigurator's figures for the rows it estimates (none where it refused them all)
        same = same_batch(group)  # and ours over its figure where it priced the planner's own batch
        groups.append({"model": model, "gpu": gpu, "tp": tp, "experts_timed_on_silicon": bool(timing and not timing.donor),
                       "experts_carried_from": timing.donor if timing else None,
                       "summary": P.error_summary(group), "mean_signed_pct_error": round(mean_signed(group), 2),
                       **({"aiconfigurator": beside[0]} if beside else {}),
                       **({"against_aiconfigurator_same_batch": signed_summary(same)} if same else {}), "rows": group})
    timed = [r for g in groups if g["experts_timed_on_silicon"] for r in g["rows"]]
    carried = [r for g in groups if g["experts_carried_from"] for r in g["rows"]]
    aic["per_gpu"] = side_by_side(rows)
    return {"table": "pipeline/data/trtllm_published_throughput_dep.tsv", "summary": P.error_summary(rows),
            "timed_on_silicon": P.error_summary(timed), **({"carried_over": P.error_summary(carried)} if carried else {}),
            "groups": groups, "aiconfigurator": aic}


def mean_signed(comparison: list[dict[str, Any]]) -> float:
    """The mean signed error %: which way a group of rows leans (fast +, slow -)."""
    return sum(r["error_pct"] for r in comparison) / len(comparison)


def signed_summary(comparison: list[dict[str, Any]]) -> dict[str, Any]:
    """error_summary with the mean signed error %."""
    return {**P.error_summary(comparison), "mean_signed_pct_error": round(mean_signed(comparison), 2)}


def summary_beside_aiconfigurator(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """signed_summary of ours, and under `aiconfigurator` of AIConfigurator's over the rows its recorded table estimates
    (pipeline/data/aiconfigurator_predictions.tsv), where it has any."""
    out = signed_summary(rows)
    theirs = [{"error_pct": r["aiconfigurator_error_pct"]} for r in rows if "aiconfigurator_error_pct" in r]
    if theirs:
        out["aiconfigurator"] = signed_summary(theirs)
    return out


def summary_text(s: dict[str, Any]) -> str:
    """A summary_beside_aiconfigurator as one printed clause."""
    theirs = s.get("aiconfigurator")
    return (f"median |error| {s['median_abs_pct_error']:5.1f}%, worst {s['max_abs_pct_error']:5.1f}%, mean signed "
            f"{s['mean_signed_pct_error']:+.1f}% over {s['rows']} rows"
            + (f"; AIConfigurator {theirs['median_abs_pct_error']:.1f}% / {theirs['max_abs_pct_error']:.1f}%, "
               f"{theirs['mean_signed_pct_error']:+.1f}% on {theirs['rows']}" if theirs else ""))


def _as_dense(backend: str, model: str) -> dict[str, Any]:
    """For an MoE whose backend times its experts on silicon: the same rows with the experts at the dense GEMM rate."""
    eff = P.efficiency_for(backend)
    if not eff.moe_measured or not P.published_model(model).moe_layer_count:
        return {}
    dense = replace(eff, moe_measured=False, moe_expert_compute=1.0)
    return {"as_dense": P.error_summary(P.compare_published(None, P.more_model_rows(model), efficiency=dense))}


def report_lines(report: dict[str, Any]) -> list[str]:
    """What scripts/plan_vs_published.py prints of it."""
    moe, prefix = report["moe"], "models outside the fit:"
    lines = [f"{prefix} {m['backend']} {m['model']} (never fitted, {m['summary']['rows']} rows): median |error| "
             f"{m['summary']['median_abs_pct_error']:.1f}%, worst {m['summary']['max_abs_pct_error']:.1f}%, mean signed "
             f"{mean_signed(m['rows']):+.1f}%"
             + (f"; experts at the dense rate instead of silicon's MoE timings: {m['as_dense']['median_abs_pct_error']:.1f}%, "
                f"{m['as_dense']['max_abs_pct_error']:.1f}%" if "as_dense" in m else "") for m in report["never_fitted"]]
    lines += [f"{prefix} {m['backend']} {m['model']} on {entry['gpu']:12s} ({entry['rows']:2d} rows) AIConfigurator median/worst "
              f"|error| {entry['aiconfigurator_median_abs_pct_error']:5.1f}% / {entry['aiconfigurator_max_abs_pct_error']:5.1f}%; ours "
              f"(never fitted) {entry['ours_in_sample_median_abs_pct_error']:5.1f}% / {entry['ours_in_sample_max_abs_pct_error']:5.1f}%"
              for m in report["never_fitted"] for entry in m.get("aiconfigurator", [])]
    lines.append(f"{prefix} Mixtral as if dense (MoE constant 1.0): median |error| {moe['as_dense']['median_abs_pct_error']:.1f}%, "
                 f"worst {moe['as_dense']['max_abs_pct_error']:.1f}%; MoE constant {moe['moe_expert_compute']} in sample: "
                 f"{moe['in_sample']['median_abs_pct_error']:.1f}%, {moe['in_sample']['max_abs_pct_error']:.1f}% (not the figure to quote)")
    for fold in moe.get("folds", []):
        lines.append(f"{prefix} Mixtral, held out {fold['held_out']} {fold['value']:14s} ({fold['rows']:3d} rows): median "
                     f"|error| {fold['median_abs_pct_error']:5.1f}%, worst {fold['max_abs_pct_error']:5.1f}%; MoE constant "
                     f"{fold['moe_expert_compute']}")
    for by, pooled in moe.get("cross_validated", {}).items():
        lines.append(f"{prefix} Mixtral cross-validated, holding out each {by}: median |error| "
                     f"{pooled['median_abs_pct_error']:.1f}%, worst {pooled['max_abs_pct_error']:.1f}% over {pooled['rows']} rows")
    gpus, prefix_gpus = report["more_gpus"], "GPUs outside the fit:"
    for g in gpus["groups"]:
        versus = (f"; published / B200's same rows {g['published_over_b200'][0]:.2f}-{g['published_over_b200'][1]:.2f}x"
                  if "published_over_b200" in g else "")
        lines.append(f"{prefix_gpus} {g['backend']} {g['trtllm_version']:7s} {g['gpu']:12s} {g['model']:15s} (never fitted, "
                     f"{g['summary']['rows']:2d} rows): "
                     f"median |error| {g['summary']['median_abs_pct_error']:5.1f}%, worst {g['summary']['max_abs_pct_error']:5.1f}%, "
                     f"mean signed {g['mean_signed_pct_error']:+.1f}%{versus}; "
                     + _aic_group(g, "refused every row" if g["gpu"] in AIC_SYSTEMS else "has no system for this GPU"))
    lines += [_aic_per_gpu(prefix_gpus, entry) for entry in gpus["aiconfigurator"]["per_gpu"]]
    dep, prefix_dep = report["dep"], "DEP (attention data parallelism, experts over the same GPUs):"
    for g in dep["groups"]:
        lines.append(f"{prefix_dep} {g['model']:16s} {g['gpu']:12s} DEP{g['tp']} (never fitted, {g['summary']['rows']} rows): median "
                     f"|error| {g['summary']['median_abs_pct_error']:5.1f}%, worst {g['summary']['max_abs_pct_error']:5.1f}%, mean "
                     f"signed {g['mean_signed_pct_error']:+.1f}%"
                     + ("" if g["experts_timed_on_silicon"] else f"; experts carried over from {g['experts_carried_from']}'s timing"
                        if g["experts_carried_from"] else "; no silicon timing of these experts (dense GEMM rate)")
                     + "; " + _aic_group(g, "not recorded")
                     + (f"; ours over AIConfigurator's at the same batch {g['against_aiconfigurator_same_batch']['mean_signed_pct_error']:+.1f}% "
                        f"({g['against_aiconfigurator_same_batch']['rows']} rows)" if "against_aiconfigurator_same_batch" in g else ""))
    lines += [_aic_per_gpu(prefix_dep, entry) for entry in dep["aiconfigurator"]["per_gpu"]]
    for name, key in (("all", "summary"), ("experts timed on silicon", "timed_on_silicon"),
                      ("experts carried over from another GPU", "carried_over")):
        if key not in dep:
            continue
        lines.append(f"{prefix_dep} {name}: median |error| {dep[key]['median_abs_pct_error']:.1f}%, worst "
                     f"{dep[key]['max_abs_pct_error']:.1f}% over {dep[key]['rows']} rows")
    for entry in moe["aiconfigurator"]["per_gpu"]:
        ours = (f"GPU held out {entry['ours_gpu_held_out_median_abs_pct_error']:5.1f}% / {entry['ours_gpu_held_out_max_abs_pct_error']:5.1f}%, "
                if "ours_gpu_held_out_median_abs_pct_error" in entry else "")
        lines.append(f"{prefix} Mixtral {entry['gpu']:10s} ({entry['rows']:3d} rows) AIConfigurator median/worst |error| "
                     f"{entry['aiconfigurator_median_abs_pct_error']:5.1f}% / {entry['aiconfigurator_max_abs_pct_error']:5.1f}%; ours "
                     f"{ours}in sample {entry['ours_in_sample_median_abs_pct_error']:5.1f}% / {entry['ours_in_sample_max_abs_pct_error']:5.1f}%")
    return lines


def _aic_group(group: dict[str, Any], missing: str) -> str:
    """A group's AIConfigurator figures for report_lines (`missing` where it has none)."""
    if "aiconfigurator" not in group:
        return f"AIConfigurator {missing}"
    aic = group["aiconfigurator"]
    return (f"AIConfigurator {aic['aiconfigurator_median_abs_pct_error']:.1f}% / {aic['aiconfigurator_max_abs_pct_error']:.1f}% "
            f"on {aic['rows']} rows")


def _aic_per_gpu(prefix: str, entry: dict[str, Any]) -> str:
    """One GPU's AIConfigurator figures beside ours (never fitted), for report_lines."""
    return (f"{prefix} {entry['gpu']:12s} ({entry['rows']:3d} rows) AIConfigurator median/worst |error| "
            f"{entry['aiconfigurator_median_abs_pct_error']:5.1f}% / {entry['aiconfigurator_max_abs_pct_error']:5.1f}%; "
            f"ours (never fitted) {entry['ours_in_sample_median_abs_pct_error']:5.1f}% / {entry['ours_in_sample_max_abs_pct_error']:5.1f}%")


def plot_panels(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """plan_vs_published.plot's panel of these rows: each never-fitted model, each Mixtral with its model held out."""
    panel = [{"value": f"{m['model']} ({m['backend']}, never fitted)", **m["summary"], "comparison": m["rows"]}
             for m in report["never_fitted"]]
    panel += [f for f in report["moe"].get("folds", []) if f["held_out"] == "model"]
    gpus = [{"value": f"{g['gpu']} {g['model']} ({g['backend']} {g['trtllm_version']}, never fitted)", **g["summary"],
             "comparison": g["rows"]}
            for g in report["more_gpus"]["groups"]]
    dep = [{"value": f"{g['model']} {g['gpu']} DEP{g['tp']} (never fitted)", **g["summary"], "comparison": g["rows"]}
           for g in report["dep"]["groups"]]
    return {"models outside the fit": panel, "GPUs outside the fit": gpus, "DEP (never fitted)": dep}

"""Which deployment a bench measured, and the planner's prediction for it beside the measurement.

The served repository is a bundle: its tokenizer is `<ROOT>/tensorrt_llm/1/tokenizer`, beside the engine
folder's manifest.json (pipeline/render/bundle.py). That manifest names the model, GPU, precision and build
limits, and, for a build chosen for an SLO (`pipeline build --slo`), the SLO and the planner's prediction.
bench records the first as `deployment` in bench.json (what `pipeline plan --calibrate` fits on) and prints
the second beside what it measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.artifacts import read_manifest


def deployment(tokenizer_dir: Path | None) -> dict[str, Any] | None:
    """The deployment the tokenizer belongs to (None when it is not an engine folder's tokenizer/)."""
    if tokenizer_dir is None:
        return None
    manifest = read_manifest(Path(tokenizer_dir).parent) or {}
    profile = manifest.get("profile")
    if not isinstance(profile, dict) or not profile.get("gpu"):
        return None
    slo_plan = manifest.get("slo_plan") or {}
    return {
        "model": profile.get("model"), "gpu": profile["gpu"], "backend": profile.get("backend") or "tensorrt",
        "runtime": profile.get("runtime"), "quant": profile.get("quant"), "kv_cache": profile.get("kv_cache"),
        "tp": profile.get("tp", 1), "pp": profile.get("pp", 1), "attention_dp": bool(profile.get("attention_dp")),
        "max_batch_size": profile.get("max_batch_size"),
        "max_num_tokens": profile.get("max_num_tokens"),
        "kv_cache_free_gpu_mem_fraction": slo_plan.get("kv_cache_free_gpu_mem_fraction", 0.9),
        "engine_dir": str(Path(tokenizer_dir).parent), "slo_plan": slo_plan or None,
    }


def planned_beside_measured(dep: dict[str, Any] | None, levels: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Per concurrency level: the planner's TTFT/TPOT p50/p99 for this deployment's build beside the measured
    ones, and whether the SLO it was built for passes in each (None without an SLO plan)."""
    if not dep or not dep.get("slo_plan"):
        return None
    from pipeline.planner import Scenario
    from pipeline.planner.cpu import plan_target
    from pipeline.planner.shapes import model_spec_from_config
    from pipeline.planner.slo import SloTarget, backend_efficiency, latency, meets

    plan = dep["slo_plan"]
    config = Path(dep["engine_dir"]) / "model" / "config.json"
    config = config if config.is_file() else Path(dep["engine_dir"]) / "config.json"
    model = model_spec_from_config(config)
    slo = SloTarget(bounds=plan["slo"])
    build = {k: dep[k] for k in ("max_batch_size", "max_num_tokens", "kv_cache_free_gpu_mem_fraction")}
    factors = plan.get("factors") or {}
    rows = []
    for lv in levels:
        if not lv.get("concurrency") or not lv.get("completed"):
            continue
        isl, osl = int(round(lv["isl"]["mean"])), int(round(lv["osl"]["mean"]))
        scenario = Scenario(model, plan_target(dep["gpu"]), dep["quant"] or "fp16", dep["kv_cache"], int(dep["tp"] or 1), isl, osl,
                            attention_dp=bool(dep.get("attention_dp")), pp=int(dep.get("pp") or 1))
        predicted = latency(scenario, int(lv["concurrency"]), {**build, "max_input_len": isl, "max_seq_len": isl + osl},
                            backend_efficiency(scenario, dep["backend"])).scaled(factors, plan.get("offsets_ms"))
        measured = {f"{m}_{s}_ms": (lv.get(f"{m}_ms") or {}).get(s) for m in ("ttft", "tpot") for s in ("p50", "p99")}
        passed = all(v is not None and v <= slo.bounds[k] for k, v in measured.items() if k in slo.bounds)
        rows.append({"load": lv["load"], "concurrency": lv["concurrency"], "measured": measured,
                     "predicted": {k: predicted.value(k) for k in measured}, "slo": slo.bounds,
                     "slo_predicted_pass": meets(slo, predicted), "slo_measured_pass": passed})
    return rows

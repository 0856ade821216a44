"""`pipeline build --slo ...`: the limits the planner's SLO search (pipeline/planner/search.py) chooses for
this build's own GPU, precision, KV cache, TP and backend, and the record of that choice for the manifest (the
SLO, the ISL/OSL it was planned for, the chosen max_batch_size / max_num_tokens / KV fraction, the prediction
and, when calibrated from bench results, the factors and interval).

Both backends take the choice: the engine path as trtllm-build's limits (render then takes the KV fraction:
pipeline/render/slo.py); the PyTorch backend as the LLM-API options max_batch_size, max_num_tokens and
kv_cache_config.free_gpu_memory_fraction (fields of TorchLlmArgs / KvCacheConfig at TensorRT-LLM 1.1.0:
pipeline/data/trtllm_llm_args.tsv), which the Triton LLM-API model.yaml and trtllm-serve read as they are.
A limit given on the command line wins over the choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.build.llm_args import check_options
from pipeline.core.errors import InvalidInputError

FRACTION = "kv_cache_free_gpu_mem_fraction"
IDENTITY_KEYS = ("slo", "isl", "osl", "factors", "offsets_ms")  # what the inputs hash takes of the record


def slo_choice(model_path: Path, target, spec) -> dict[str, Any]:
    """The chosen build of the SLO search for one target (an EngineTarget) as the manifest's `slo_plan`."""
    from pipeline.planner.calibrate import fit_calibration
    from pipeline.planner.prices import load_prices
    from pipeline.planner.search import SearchSpec, require_feasible, search
    from pipeline.planner.shapes import model_spec_from_config
    from pipeline.planner.slo import parse_slo

    if not spec.slo_isl or not spec.slo_osl:
        raise InvalidInputError("--slo needs the traffic it is planned for: --isl and --osl.",
                                hint="e.g. pipeline build --slo ttft_p99_ms=500,tpot_p99_ms=40 --isl 2048 --osl 256 ...")
    search_spec = SearchSpec(model=model_path, slo=parse_slo(spec.slo), isl=spec.slo_isl, osl=spec.slo_osl,
                             gpus=(target.gpu.key,), quants=(target.quant.name,), kv_caches=(target.kv.name,),
                             tps=(target.tp,), pps=(target.pp,), backend=spec.backend,
                             attention_dp=(target.attention_dp,))
    calibration = None
    if spec.calibrate:
        calibration = fit_calibration(list(spec.calibrate), model_spec_from_config(model_path), model_path,
                                      (target.gpu.key,), spec.backend)
    chosen = require_feasible(search(search_spec, load_prices(), calibration))
    return {
        "slo": search_spec.slo.bounds, "isl": spec.slo_isl, "osl": spec.slo_osl, "backend": spec.backend,
        "max_batch_size": chosen.max_batch_size, "max_num_tokens": chosen.max_num_tokens,
        FRACTION: chosen.kv_cache_free_gpu_mem_fraction,
        "concurrency": chosen.concurrency, "prediction": chosen.latency.model_dump(),
        "interval": chosen.interval, "factors": calibration.factors if calibration else None,
        "offsets_ms": calibration.offsets_ms if calibration else None,
        "calibrated_from": calibration.sources if calibration else None,
    }


def slo_limits(model_path: Path, target, spec) -> tuple[dict[str, Any] | None, dict[str, int | None]]:
    """(the `slo_plan` record or None without --slo, default_limits' keyword arguments): each limit the spec gives,
    else the SLO choice's; an SLO build is for its ISL/OSL unless the lengths are given."""
    plan = slo_choice(model_path, target, spec) if spec.slo else None
    chosen = plan or {}
    return plan, {"max_input_len": spec.max_input_len or chosen.get("isl"),
                  "max_seq_len": spec.max_seq_len or (chosen["isl"] + chosen["osl"] if chosen else None),
                  "max_batch_size": spec.max_batch_size or chosen.get("max_batch_size"),
                  "max_num_tokens": spec.max_num_tokens or chosen.get("max_num_tokens")}


def slo_identity(plan: dict[str, Any] | None) -> dict[str, Any]:
    """The part of an SLO plan the build's inputs hash takes ({} without one): a new SLO or calibration is a new build."""
    return {"slo_plan": {k: plan.get(k) for k in IDENTITY_KEYS}} if plan else {}


def with_slo_options(options: dict[str, Any], why: dict[str, str],
                     plan: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """A PyTorch-backend deployable's LLM-API options with the SLO choice: max_batch_size and max_num_tokens are already
    the limits (slo_limits); kv_cache_config.free_gpu_memory_fraction becomes the choice's KV fraction."""
    if plan is None:
        return options, why
    from pipeline.planner.slo import bounds_text

    options = {**options, "kv_cache_config": {**options["kv_cache_config"], "free_gpu_memory_fraction": plan[FRACTION]}}
    chosen = f"chosen by the SLO search for {bounds_text(plan['slo'])} at ISL {plan['isl']} / OSL {plan['osl']} (manifest slo_plan)"
    why = {**why, "kv_cache_config.free_gpu_memory_fraction": f"the KV fraction the SLO search planned memory with: {chosen}"}
    for key in ("max_batch_size", "max_num_tokens"):
        if options[key] == plan[key]:
            why[key] = f"{key} {chosen}"
    check_options(options)
    return options, why

"""`pipeline build --slo ...`: the limits the planner's SLO search (pipeline/planner/search.py) chooses for
this build's own GPU, precision, KV cache and TP, and the record of that choice for the manifest (the SLO,
the ISL/OSL it was planned for, the chosen max_batch_size / max_num_tokens / KV fraction, the prediction
and, when calibrated from bench results, the factors and interval)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.errors import InvalidInputError


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
                             tps=(target.tp,), backend=spec.backend)
    calibration = None
    if spec.calibrate:
        calibration = fit_calibration(list(spec.calibrate), model_spec_from_config(model_path), model_path,
                                      (target.gpu.key,), spec.backend)
    chosen = require_feasible(search(search_spec, load_prices(), calibration))
    return {
        "slo": search_spec.slo.bounds, "isl": spec.slo_isl, "osl": spec.slo_osl,
        "max_batch_size": chosen.max_batch_size, "max_num_tokens": chosen.max_num_tokens,
        "kv_cache_free_gpu_mem_fraction": chosen.kv_cache_free_gpu_mem_fraction,
        "concurrency": chosen.concurrency, "prediction": chosen.latency.model_dump(),
        "interval": chosen.interval, "factors": calibration.factors if calibration else None,
        "offsets_ms": calibration.offsets_ms if calibration else None,
        "calibrated_from": calibration.sources if calibration else None,
    }

"""The tensorrt_llm model's kv_cache_free_gpu_mem_fraction for an engine built for an SLO.

`pipeline build --slo` records the planner's choice as `slo_plan` in the engine folder's manifest.json
(pipeline/build/slo.py), the KV fraction among it. render takes that fraction when the operator gives none
(`--kv-cache-free-gpu-mem-fraction`); a given one wins, and a note says which plan value it overrides. Without
an SLO plan the fraction is TensorRT-LLM's default. Every repository rendered from the folder (`pipeline render`,
the bundle `pipeline k8s render` makes, `pipeline engine`) goes through here, so all carry the same value.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.artifacts import read_manifest
from pipeline.core.errors import InvalidInputError
from pipeline.planner.memory import DEFAULT_KV_FRACTION

FRACTION_KEY = "kv_cache_free_gpu_mem_fraction"


def planned_kv_fraction(engine: Path) -> float | None:
    """The KV fraction of the engine folder's SLO plan (None: the folder was not built with --slo)."""
    plan = (read_manifest(Path(engine)) or {}).get("slo_plan")
    if not isinstance(plan, dict) or plan.get(FRACTION_KEY) is None:
        return None
    value = plan[FRACTION_KEY]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InvalidInputError(f"{Path(engine) / 'manifest.json'} records slo_plan.{FRACTION_KEY} {value!r}, not a "
                                "fraction in (0, 1].",
                                hint="Rebuild the engine with `pipeline build --slo ...`, or give "
                                "--kv-cache-free-gpu-mem-fraction explicitly.")
    return float(value)


def kv_fraction(given: float | None, engine: Path) -> tuple[float, list[str]]:
    """(the fraction to render, notes): the operator's, else the SLO plan's, else TensorRT-LLM's default."""
    planned = planned_kv_fraction(engine)
    if given is None:
        if planned is None:
            return DEFAULT_KV_FRACTION, []
        return planned, [f"{FRACTION_KEY} {planned:g}: the SLO plan's (slo_plan in {Path(engine) / 'manifest.json'})"]
    if planned is not None and given != planned:
        return given, [f"--kv-cache-free-gpu-mem-fraction {given:g} overrides the SLO plan's {planned:g} "
                       f"(slo_plan in {Path(engine) / 'manifest.json'}): the predicted latencies assumed {planned:g}"]
    return given, []

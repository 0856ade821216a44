"""`pipeline plan --calibrate BENCH.json...`: correction factors for one GPU and backend, fitted on bench
results of a deployment built by this pipeline, and the error that remains as an interval.

A bench report (`bench.json`) of a deployment carries a `deployment` block (pipeline/bench/deployment.py):
the model, GPU, backend, precision and build limits of the engine folder it served. For each measured level
the planner predicts TTFT and TPOT p50/p99 (planner/slo.py) on that build at that ISL/OSL/concurrency. Each
metric is fitted as measured = factor x predicted + offset (ms), least squares on the relative error: the
offset is what the model has no term for (a fixed cost per request or per iteration: on the CPU, Python), the
factor what it gets wrong in proportion, so the fit carries to other ISL/OSL better than a factor alone.
Where the levels do not tell the two apart (their predictions hardly differ) or the fit would need a negative
offset, the factor alone (the geometric mean of measured/predicted) is fitted.

On the CPU that fallback is the offset alone (factor 1), the factor alone only where the model predicts too
much: the planner measured this host's bandwidth and FLOP/s itself (planner/cpu.py), so what a bench adds is
the Python cost per request and per token those rates cannot see. A factor fitted there instead takes up how
two clients share two cores at one ISL/OSL and multiplies it into every other: calibrated at ISL 64/OSL 16, a
TPOT factor of ~3 put ISL 256/OSL 8 at 2-4x its measured TPOT, and the median error there rose in three of four
benched pairs (36.8 -> 39.7, 24.6 -> 48.7, 18.2 -> 35.2%; 15.2 -> 14.4); with the offset it fell in all four
(-> 11.1, 15.8, 13.4, 12.5%).

The band is the largest remaining |log(measured / calibrated prediction)|: a calibrated prediction v is given
as [v e^-band, v e^band].
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import GpuSpec, get_gpu
from pipeline.planner.cpu import plan_target
from pipeline.planner.scenario import Scenario
from pipeline.planner.shapes import ModelSpec
from pipeline.planner.slo import Latency, backend_efficiency, latency

METRICS = {"ttft": ("ttft_p50_ms", "ttft_p99_ms"), "tpot": ("tpot_p50_ms", "tpot_p99_ms")}
BENCH_HINT = ("Calibrate from `pipeline bench` reports (bench.json) of a deployment of this model on this GPU: "
              "build it with `pipeline build`, render, serve, bench, then pass build/<model>/reports/bench-*/bench.json.")


class Calibration(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    backend: str
    target: GpuSpec  # the figures the factors were fitted against (the CPU's measured ones)
    factors: dict[str, float]
    offsets_ms: dict[str, float] = {}
    band: dict[str, float]
    error_before: dict[str, float]  # median and worst |predicted/measured - 1|, %
    error_after: dict[str, float]
    points: int
    sources: list[str]

    def matches(self, gpu: str, backend: str) -> bool:
        return self.gpu == get_gpu(gpu).key and self.backend == backend

    def apply(self, value: Latency) -> Latency:
        return value.scaled(self.factors, self.offsets_ms)

    def interval(self, value: Latency) -> dict[str, tuple[float, float]]:
        out = {}
        for metric, keys in METRICS.items():
            spread = math.exp(self.band.get(metric, 0.0))
            for key in keys:
                out[key] = (round(value.value(key) / spread, 3), round(value.value(key) * spread, 3))
        return out

    def summary(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"target"})


def model_identity(model_path: Path) -> str:
    """The name a deployment's manifest gives the model: the folder's name (build/<model>/hf: <model>); a config file
    named after its model (llama-3.1-8b.json), that name."""
    folder = Path(model_path)
    if folder.suffix == ".json" and folder.name != "config.json":
        return folder.stem
    folder = folder.parent if folder.name == "config.json" else folder
    return folder.parent.name if folder.name == "hf" else folder.name


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInputError(f"Cannot read the bench report {path}: {error}.", hint=BENCH_HINT) from None
    if not isinstance(data, dict) or not isinstance(data.get("deployment"), dict):
        raise InvalidInputError(f"{path} does not say which deployment it measured (no `deployment` block).",
                                hint=BENCH_HINT)
    return data


def _check_identity(path: Path, deployment: dict[str, Any], model: str, gpus: Iterable[str]) -> None:
    keys = [get_gpu(g).key for g in gpus]
    if deployment.get("model") != model:
        raise InvalidInputError(
            f"{path} measured {deployment.get('model')!r}, not {model!r}: another model's bench cannot calibrate this plan.",
            hint=f"Pass --model for {deployment.get('model')!r}, or bench a deployment of {model!r}. " + BENCH_HINT)
    if keys and deployment.get("gpu") not in keys:
        raise InvalidInputError(
            f"{path} measured {deployment.get('gpu')!r}, not {' or '.join(keys)}: another GPU's bench cannot calibrate these.",
            hint=f"Plan for --gpus {deployment.get('gpu')}, or bench a deployment on {keys[0]}. " + BENCH_HINT)


def _pairs(data: dict[str, Any], model: ModelSpec, target: GpuSpec) -> list[tuple[str, float, float]]:
    """(metric, measured, predicted) for every stat of every level of one report."""
    dep = data["deployment"]
    build = {k: dep[k] for k in ("max_batch_size", "max_num_tokens", "kv_cache_free_gpu_mem_fraction")}
    out = []
    for level in data.get("levels") or []:
        if not level.get("concurrency") or not level.get("completed"):
            continue
        isl, osl = int(round(level["isl"]["mean"])), int(round(level["osl"]["mean"]))
        scenario = Scenario(model, target, dep.get("quant") or "fp16", dep.get("kv_cache"), int(dep.get("tp") or 1), isl, osl,
                            attention_dp=bool(dep.get("attention_dp")), pp=int(dep.get("pp") or 1))  # older benches lack the keys
        predicted = latency(scenario, int(level["concurrency"]), {**build, "max_input_len": isl, "max_seq_len": isl + osl},
                            backend_efficiency(scenario, dep.get("backend") or "tensorrt"))
        for metric, keys in METRICS.items():
            for key in keys:
                measured = (level.get(f"{metric}_ms") or {}).get(key.split("_")[1])
                if measured and predicted.value(key) > 0 and (metric != "tpot" or osl > 1):
                    out.append((metric, float(measured), predicted.value(key)))
    return out


def fit_factor_offset(points: list[tuple[float, float]], fixed_costs_first: bool = False) -> tuple[float, float]:
    """(factor, offset) minimising sum(((factor p + offset) - m) / m)^2 over (measured m, predicted p). Where the two
    cannot be told apart or the offset would be negative: the factor alone, or with fixed_costs_first (the CPU,
    module docstring) the offset alone at factor 1 while it is not negative."""
    xs, ys = [p / m for m, p in points], [1 / m for m, _ in points]
    sxx, sxy, syy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys)), sum(y * y for y in ys)
    sx, sy = sum(xs), sum(ys)
    det = sxx * syy - sxy * sxy
    predicted = [p for _, p in points]
    if len(points) >= 2 and (max(predicted) - min(predicted)) / max(predicted) > 0.15 and det > 1e-12 * sxx * syy:
        factor, offset = (sx * syy - sy * sxy) / det, (sy * sxx - sx * sxy) / det
        if factor > 0 and offset >= 0:
            return factor, offset
    if fixed_costs_first:
        offset = sum((m - p) / (m * m) for m, p in points) / sum(1 / (m * m) for m, _ in points)
        if offset >= 0:
            return 1.0, offset
    return math.exp(statistics.fmean(math.log(m / p) for m, p in points)), 0.0


def _errors(pairs: list[tuple[str, float, float]], factors: dict[str, float],
            offsets: dict[str, float] | None = None) -> dict[str, float]:
    offsets = offsets or {}
    errors = [abs((p * factors.get(m, 1.0) + offsets.get(m, 0.0)) / v - 1) * 100 for m, v, p in pairs]
    return {"median_pct": round(statistics.median(errors), 2), "worst_pct": round(max(errors), 2)}


def fit_calibration(files: list[Path], model: ModelSpec, model_path: Path, gpus: Iterable[str] = (),
                    backend: str = "tensorrt") -> Calibration:
    """Factors per metric from the bench reports `files` (one deployment's GPU and backend)."""
    name = model_identity(model_path)
    reports = [(Path(f), _read(Path(f))) for f in files]
    for path, data in reports:
        _check_identity(path, data["deployment"], name, gpus)
    found = {(d["deployment"].get("gpu"), d["deployment"].get("backend") or "tensorrt") for _, d in reports}
    if len(found) > 1:
        raise InvalidInputError(f"The bench reports measured different targets ({sorted(found)}).",
                                hint="Calibrate one GPU and backend at a time.")
    ((gpu, measured_backend),) = found
    if measured_backend != backend:
        raise InvalidInputError(f"The bench reports measured the {measured_backend} backend, not {backend}.",
                                hint=f"Plan with --backend {measured_backend}, or bench a {backend} deployment.")
    target = plan_target(gpu)
    pairs = [pair for _, data in reports for pair in _pairs(data, model, target)]
    if not pairs:
        raise InvalidInputError("The bench reports hold no completed concurrency level to calibrate on.", hint=BENCH_HINT)
    factors, offsets, band = {}, {}, {}
    for metric in METRICS:
        points = [(v, p) for m, v, p in pairs if m == metric]
        if points:
            factor, offset = fit_factor_offset(points, fixed_costs_first=target.is_cpu)
            factors[metric], offsets[metric] = round(factor, 4), round(offset, 3)
            band[metric] = round(max(abs(math.log(v / (factor * p + offset))) for v, p in points), 4)
    return Calibration(model=name, gpu=get_gpu(gpu).key, backend=backend, target=target, factors=factors,
                       offsets_ms=offsets, band=band, error_before=_errors(pairs, {}),
                       error_after=_errors(pairs, factors, offsets), points=len(pairs),
                       sources=[str(p) for p, _ in reports])


def prediction_error(files: list[Path], model: ModelSpec, calibration: Calibration | None) -> dict[str, float]:
    """Median/worst |predicted/measured - 1| (%) of the (calibrated) planner on other bench reports: the
    out-of-sample check of a calibration."""
    target = calibration.target if calibration else None
    pairs = [pair for f in files for pair in _pairs(_read(Path(f)), model, target or plan_target(_read(Path(f))["deployment"]["gpu"]))]
    return _errors(pairs, calibration.factors if calibration else {}, calibration.offsets_ms if calibration else None)

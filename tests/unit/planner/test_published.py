"""pipeline.planner.published and scripts/plan_vs_published.py: the time model against TensorRT-LLM's published
throughput (pipeline/data/trtllm_published_throughput.tsv), cross-validated honestly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.planner.published import published_rows
from pipeline.planner.rates import PRIOR, efficiency_for

# README, "Capacity and latency planning", quotes these cross-validated figures (median, worst |error| %, pooled
# over every fold of that kind); each fold is refitted from PRIOR on its training rows only.
CV_QUOTED = {
    ("tensorrt", "gpu"): (7.5, 55.2), ("tensorrt", "model"): (13.9, 70.7),
    ("pytorch", "gpu"): (19.1, 58.2), ("pytorch", "model"): (7.8, 35.2),
}


def _script(name: str = "plan_vs_published"):
    import importlib.util
    import sys

    scripts = Path(__file__).resolve().parents[3] / "scripts"
    sys.path.insert(0, str(scripts))
    spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_a_fold_never_sees_its_held_out_rows() -> None:
    """Held-out rows do not move their fold's constants, and a constant no training row informs stays at PRIOR
    (before: every fold started from the constants fitted on all rows, and the A100 fold kept their 16-bit compute)."""
    module = _script()
    rows = _small_table()
    folds = {f["value"]: f for f in module.cross_validate(rows, "gpu")}
    a100 = folds["a100-80gb"]
    assert a100["constants"]["compute_efficiency_16bit"] == PRIOR.compute_16bit
    assert a100["kept_at_prior"] == ["compute_efficiency_16bit"]
    doubled = [{**r, "tokens_per_s": str(2 * float(r["tokens_per_s"]))} if r["gpu"] == "a100-80gb" else r for r in rows]
    again = {f["value"]: f for f in module.cross_validate(doubled, "gpu")}["a100-80gb"]
    assert again["constants"] == a100["constants"]
    assert again["median_abs_pct_error"] != a100["median_abs_pct_error"]


@pytest.mark.slow
def test_cross_validated_error_is_what_the_readme_quotes() -> None:
    """Every fold (each GPU, then each model, held out whole) on both backends; the pooled figures are the README's."""
    module = _script()
    for backend in ("tensorrt", "pytorch"):
        rows = published_rows(backend)
        for by in ("gpu", "model"):
            folds = module.cross_validate(rows, by)
            assert sorted(f["value"] for f in folds) == sorted({r[by] for r in rows})
            pooled = module.cross_validated_error(folds)
            print(f"{backend} by {by}: median {pooled['median_abs_pct_error']:.1f}% worst {pooled['max_abs_pct_error']:.1f}%")
            assert pooled["rows"] == len(rows)
            median, worst = CV_QUOTED[(backend, by)]
            assert pooled["median_abs_pct_error"] == pytest.approx(median, abs=0.5)
            assert pooled["max_abs_pct_error"] == pytest.approx(worst, abs=0.5)


def test_fit_script_writes_json_csv_and_png(tmp_path: Path) -> None:
    module = _script()
    assert module.main(["--backend", "tensorrt", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "plan_vs_published.json").read_text())
    part = report["backends"]["tensorrt"]
    assert part["constants"] == efficiency_for("tensorrt").as_dict() and len(part["rows"]) == len(published_rows("tensorrt"))
    assert part["aiconfigurator"].startswith("not asked")
    assert (tmp_path / "plan_vs_published_folds.csv").read_text().startswith("backend,held_out,value")
    assert (tmp_path / "plan_vs_published.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_aiconfigurator_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AIConfigurator on PATH the comparison says so and changes no row."""
    monkeypatch.setenv("PATH", "/nonexistent")
    rows = P.compare_published(None, published_rows("tensorrt")[:2])
    assert _script("plan_vs_aiconfigurator").annotate(rows).startswith("not installed")
    assert all("aiconfigurator" not in r for r in rows)

"""pipeline.planner.published: the time model against TensorRT-LLM's published throughput table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P

# README, "Capacity and latency planning": the figure quoted is the cross-validated one (5.3% when written).
CV_MEDIAN_MAX_PCT, CV_WORST_MAX_PCT = 6.0, 20.0


def test_against_published_trtllm_throughput(llama8b: P.ModelSpec, reference_tsv) -> None:
    """Predicted vs published output tokens/s per row (printed; see with -s), median |error| <= 10%."""
    rows = reference_tsv("trtllm_published_throughput.tsv")
    assert len(rows) >= 36
    comparison = P.compare_published(llama8b, rows)
    print(f"\n{'gpu':10} {'prec':5} {'isl':>6} {'osl':>5} {'published':>10} {'predicted':>10} {'error':>7}  bound")
    for r in comparison:
        print(f"{r['gpu']:10} {r['precision']:5} {r['isl']:6} {r['osl']:5} {r['published_tokens_per_s']:10.0f} "
              f"{r['predicted_tokens_per_s']:10.0f} {r['error_pct']:+6.1f}%  {r['bound']}")
    mdape = P.median_abs_pct_error(comparison)
    print(f"median absolute percentage error: {mdape:.2f}%")
    assert mdape <= 10.0
    assert max(abs(r["error_pct"]) for r in comparison) <= 25.0


def _fit_script():
    import importlib.util

    script = Path(__file__).resolve().parents[3] / "scripts" / "plan_vs_published.py"
    spec = importlib.util.spec_from_file_location("plan_vs_published", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cross_validated_error_is_what_the_readme_quotes(llama8b: P.ModelSpec, reference_tsv) -> None:
    """Leave one GPU out: the constants are refitted on the other GPUs' rows and predict the held-out
    GPU's rows; pooled over the 36 rows the median |error| stays under the README's 6% (the in-sample
    figure, ~4%, is not quoted: the constants were fitted on those rows)."""
    module = _fit_script()
    rows = reference_tsv("trtllm_published_throughput.tsv")
    pooled = module.cross_validated_error(module.cross_validate(llama8b, rows, P.EFFICIENCY))
    print(f"cross-validated median |error| {pooled['median_abs_pct_error']:.1f}% over {pooled['rows']} rows, "
          f"worst {pooled['max_abs_pct_error']:.1f}%")
    assert pooled["rows"] == len(rows) >= 36
    assert pooled["median_abs_pct_error"] < CV_MEDIAN_MAX_PCT
    assert pooled["max_abs_pct_error"] < CV_WORST_MAX_PCT


def test_fit_script_writes_json_and_png(tmp_path: Path) -> None:
    module = _fit_script()
    assert module.main(["--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "plan_vs_published.json").read_text())
    assert report["median_abs_pct_error"] <= 10.0 and len(report["rows"]) >= 36
    assert (tmp_path / "plan_vs_published.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

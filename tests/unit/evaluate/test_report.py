"""pipeline.evaluate.report: the table, Markdown, CSV and PNG of one evaluation."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from evaluate_fixtures import sample_result as _result
from pipeline.evaluate.report import markdown_table, write_reports


def test_reports_json_csv_markdown_png(tmp_path: Path):
    result = _result(tmp_path)
    paths = write_reports(result, tmp_path)
    assert set(paths) == {"json", "csv", "markdown", "plot"}
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["plot"].stat().st_size > 10_000
    rows = list(csv.DictReader(paths["csv"].open(encoding="utf-8")))
    assert [r["name"] for r in rows] == ["baseline", "fp8", "int4_awq", "fp8+kv_fp8", "nvfp4"]
    assert rows[2]["passed"] == "False" and math.isclose(float(rows[2]["perplexity"]), 12.5)
    markdown = paths["markdown"].read_text(encoding="utf-8")
    assert markdown_table(result) in markdown and "FAILED: int4_awq, nvfp4" in markdown
    assert "| fp8+kv_fp8 | fp8 | 10.500 | +5.00% | 0.9000 | 0.4000 | yes | pass |" in markdown

"""pipeline.bench.gates: SLO gates per level, and the exit-4 decision the CLI leaves to the library."""

from __future__ import annotations

import pytest

from pipeline.bench.gates import FAILED_COLUMNS, check_gates, failed_rows, require_pass
from pipeline.bench.spec import parse_slo
from pipeline.core.errors import GateFailedError

LEVELS = [{"load": "c1", "ttft_ms": {"p99": 40.0}}, {"load": "c4", "ttft_ms": {"p99": 120.0}}]


def test_a_gate_is_checked_on_every_level_and_passes_quietly():
    results = check_gates([parse_slo("ttft_p99_ms=150")], LEVELS)
    assert [(g.level, g.passed) for g in results] == [("c1", True), ("c4", True)]
    require_pass([g for g in results if not g.passed], "reports/")  # nothing failed: no error


def test_a_failed_gate_exits_4_naming_the_level_the_value_and_the_bound():
    failed = [g for g in check_gates([parse_slo("ttft_p99_ms=100")], LEVELS) if not g.passed]
    assert failed_rows(failed) == [["ttft_p99_ms", "c4", "120.000", "<= 100"]] and len(FAILED_COLUMNS) == 4
    with pytest.raises(GateFailedError) as error:
        require_pass(failed, "reports/bench-1")
    assert error.value.exit_code == 4
    assert "1 SLO gate(s) failed: ttft_p99_ms at c4 = 120.000 (bound <= 100)" in str(error.value)
    assert "reports/bench-1" in error.value.hint

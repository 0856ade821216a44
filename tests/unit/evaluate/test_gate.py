"""pipeline.evaluate.gate: formats marked against the allowed perplexity rise; exit 4 with a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluate_fixtures import sample_result as _result
from pipeline.core.errors import GateFailedError
from pipeline.evaluate.gate import apply_gate, check_gate, pct


def test_gate_marks_formats_over_the_allowed_rise(tmp_path: Path):
    result = _result(tmp_path, max_delta=0.1)
    assert [f.passed for f in result.formats] == [True, False, True, False]
    assert result.failed == ("int4_awq", "nvfp4") and not result.passed
    with pytest.raises(GateFailedError) as caught:
        check_gate(result)
    assert caught.value.exit_code == 4
    text = str(caught.value)
    assert "int4_awq" in text and "+25.00%" in text and "nvfp4" in text and "inf" in text and "fp8 " not in text
    relaxed = apply_gate(result, 10.0)
    assert relaxed.failed == ("nvfp4",)  # an infinite perplexity never passes
    strict = apply_gate(result, 0.0)
    assert set(strict.failed) == {"fp8", "int4_awq", "fp8+kv_fp8", "nvfp4"}
    check_gate(apply_gate(result.model_copy(update={"formats": result.formats[:1]}), 0.1))  # passes: no raise


def test_pct():
    assert pct(0.25) == "+25.00%" and pct(-0.031) == "-3.10%" and pct(float("inf")) == "inf"

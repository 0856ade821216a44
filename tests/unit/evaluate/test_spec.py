"""pipeline.evaluate.spec: the options of one evaluation, validated once."""

from __future__ import annotations

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.evaluate.spec import EvaluateSpec
from pipeline.quantization.simulated import Variant


def test_variants_from_formats_apply_one_kv_cache_and_drop_duplicates():
    spec = EvaluateSpec.from_formats("m", ["fp8", "FP8", "int8_sq"], "fp8")
    assert [v.name for v in spec.variants] == ["fp8+kv_fp8", "int8_sq+kv_fp8"]
    assert [v.name for v in EvaluateSpec.from_formats("m", ["fp8"], "fp16").variants] == ["fp8"]
    with pytest.raises(InvalidInputError, match="Unknown quantization format"):
        Variant(quant="fp9")
    with pytest.raises(InvalidInputError, match="Unknown KV-cache format"):
        Variant(quant="fp8", kv_cache="int4")

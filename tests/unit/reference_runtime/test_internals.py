"""The reference runtime checks, when its engine starts, every transformers internal it relies on, and a missing
one stops it with an error naming it (pipeline/reference_runtime/internals.py). Before, a renamed attribute made
the KV-blocks metric read 0 (and every wait for an idle engine pass) or the sampler silently unused."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from pipeline.reference_runtime import internals
from pipeline.reference_runtime.internals import TransformersInternalsError, check_before_load, check_manager


def test_the_installed_transformers_has_every_internal() -> None:
    check_before_load()


@pytest.mark.parametrize("owner, attribute", [
    ("transformers.generation.utils:GenerationMixin", "_get_logits_processor"),
    ("transformers.generation.continuous_batching.cache:PagedAttentionCache", "compute_free_capacity"),
    ("transformers.integrations.sdpa_attention", "sdpa_attention_forward"),
    ("transformers.modeling_utils", "ALL_ATTENTION_FUNCTIONS"),
])
def test_a_missing_internal_is_named(monkeypatch, owner: str, attribute: str) -> None:
    import importlib

    module, _, name = owner.partition(":")
    target = importlib.import_module(module)
    target = getattr(target, name) if name else target
    monkeypatch.delattr(target, attribute)
    with pytest.raises(TransformersInternalsError, match=attribute):
        check_before_load()


def test_a_missing_sdpa_entry_and_request_field_are_named(monkeypatch) -> None:
    from transformers import modeling_utils
    from transformers.generation.continuous_batching import requests

    monkeypatch.setattr(modeling_utils, "ALL_ATTENTION_FUNCTIONS", {})
    with pytest.raises(TransformersInternalsError, match=r'ALL_ATTENTION_FUNCTIONS\["sdpa"\]'):
        check_before_load()
    monkeypatch.undo()

    @__import__("dataclasses").dataclass
    class RenamedState:
        kwargs_for_logits: dict

    monkeypatch.setattr(requests, "RequestState", RenamedState)
    with pytest.raises(TransformersInternalsError, match="RequestState.logit_processor_kwargs"):
        check_before_load()


def test_the_manager_attributes_are_named() -> None:
    good = types.SimpleNamespace(logit_processor=types.SimpleNamespace(tensors_required=0), batch_processor=None)
    check_manager(good)
    with pytest.raises(TransformersInternalsError, match="logit_processor.tensors_required"):
        check_manager(types.SimpleNamespace(logit_processor=types.SimpleNamespace(), batch_processor=None))
    with pytest.raises(TransformersInternalsError, match="ContinuousBatchingManager.batch_processor"):
        check_manager(types.SimpleNamespace(logit_processor=types.SimpleNamespace(tensors_required=0)))


def test_transformers_is_pinned_to_the_minor_release_the_internals_were_read_from() -> None:
    import transformers

    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text(encoding="utf-8")
    pins = set(re.findall(r'"(transformers(?:\[serving\])?[<>=][^"]*)"', text))
    low = internals.TESTED_TRANSFORMERS
    major, minor = map(int, low.split("."))
    assert pins == {f"transformers{extra}>={low},<{major}.{minor + 1}" for extra in ("", "[serving]")}
    assert transformers.__version__.startswith(low + ".")

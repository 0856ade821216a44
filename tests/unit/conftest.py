"""Fixtures of the unit tests in more than one file."""

from __future__ import annotations

import pytest

from pipeline.planner import ModelSpec, model_spec_from_config

from planner_cases import LLAMA_8B


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    """Llama-3.1-8B's ModelSpec, from tests/fixtures/llama-3.1-8b/config.json (planner and placement tests)."""
    return model_spec_from_config(LLAMA_8B)

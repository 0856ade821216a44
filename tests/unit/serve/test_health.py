"""pipeline.serve.health without a server: the model load failures read from a tritonserver log."""

from __future__ import annotations

from pipeline.serve.health import load_failures


def test_load_failures_name_the_model_and_quote_the_line() -> None:
    log = (
        "I1130 03:23:50 model_lifecycle.cc:472] loading: echo:1\n"
        "E1130 03:23:51.1 1 model_lifecycle.cc:654] \"failed to load 'broken' version 1: Internal: "
        "ModuleNotFoundError: No module named 'nope'\"\n"
        "| Model  | Version | Status |\n"
        "| broken | 1       | UNAVAILABLE: Internal: ModuleNotFoundError |\n"
        "| other  | 1       | UNAVAILABLE: Invalid argument: bad dims |\n"
        "| echo   | 1       | READY  |\n"
    )
    failures = load_failures(log)
    assert set(failures) == {"broken", "other"}
    assert "No module named 'nope'" in failures["broken"]
    assert "bad dims" in failures["other"]

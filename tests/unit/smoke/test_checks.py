"""Which --skip lists smoke accepts: each check declares what it needs, and a skip that starves a later
check, names no check, or leaves nothing to check is refused (exit 2) before any request is sent.
The plan is a pure function of the spec and the served model's description, so no server is needed here;
tests/integration/test_smoke.py runs the same refusals through the CLI against a real tritonserver."""

from __future__ import annotations

import pytest

from pipeline.clients.contract import Served
from pipeline.core.errors import InvalidInputError
from pipeline.smoke.checks import SmokeSpec, plan_checks, refuse_bad_skips

ENSEMBLE = Served(kind="triton-ensemble", url="127.0.0.1:1", model="ensemble", decoupled=True)
LLMAPI = Served(kind="triton-llmapi", url="127.0.0.1:1", model="tensorrt_llm", decoupled=True)
OPENAI = Served(kind="openai", url="http://127.0.0.1:1/v1", model="m")


def plan(served: Served = ENSEMBLE):
    return plan_checks(SmokeSpec(url=served.url), served, "tensorrt_llm_bls" if served is ENSEMBLE else None)


def refusal(skip: tuple[str, ...], served: Served = ENSEMBLE) -> str:
    with pytest.raises(InvalidInputError) as caught:
        refuse_bad_skips(plan(served), skip)
    assert caught.value.exit_code == 2
    return caught.value.message


def test_every_need_has_a_provider_that_runs_before_it():
    for served in (ENSEMBLE, LLMAPI, OPENAI):
        provided: set[str] = set()
        for check in plan(served):
            assert set(check.needs) <= provided, (served.kind, check.name)
            provided |= set(check.provides)


def test_skipping_greedy_is_refused_naming_the_check_that_needs_it():
    message = refusal(("greedy",))
    assert "'streaming'" in message and "greedy" in message
    refuse_bad_skips(plan(), ("greedy", "streaming", "stop_word", "tensorrt_llm_bls_equals_ensemble"))


def test_skipping_greedy_over_the_llmapi_contract_also_needs_max_tokens_skipped():
    message = refusal(("greedy", "streaming", "stop_word"), LLMAPI)
    assert "'max_tokens'" in message
    refuse_bad_skips(plan(LLMAPI), ("greedy", "streaming", "stop_word", "max_tokens"))


def test_skipping_live_ready_is_refused_naming_what_it_provides():
    message = refusal(("live_ready",))
    assert "live_ready" in message and "decoupled" in message
    refuse_bad_skips(plan(), ("live_ready", "streaming", "streaming_refused", "max_tokens", "concurrent_8"))


def test_skipping_every_check_is_refused():
    every = tuple(c.name for c in plan())
    assert "no smoke check" in refusal(every)


def test_a_skip_that_names_no_check_is_refused():
    assert "too_long" in refusal(("too_long",))


def test_the_skips_the_readme_names_for_transformers_serve_are_accepted():
    refuse_bad_skips(plan(OPENAI), ("stop_word", "too_long_prompt"))


def test_the_skips_the_openai_integration_tests_use_are_accepted():
    refuse_bad_skips(plan(OPENAI), ("greedy", "streaming", "max_tokens", "stop_word", "concurrent_8", "too_long_prompt"))
    refuse_bad_skips(plan(OPENAI), ("metadata", "greedy", "streaming", "max_tokens", "stop_word", "concurrent_8"))


def test_lora_check_runs_only_on_a_deployment_with_adapters():
    """--lora-task-id N adds the lora check after greedy (whose answer it compares with); it needs greedy."""
    plain = [c.name for c in plan_checks(SmokeSpec(url=ENSEMBLE.url), ENSEMBLE, None)]
    assert "lora" not in plain
    checks = plan_checks(SmokeSpec(url=ENSEMBLE.url, lora_task_id=3), ENSEMBLE, None)
    names = [c.name for c in checks]
    assert names.index("lora") == names.index("greedy") + 1
    with pytest.raises(InvalidInputError):
        refuse_bad_skips(checks, ("greedy",))
    with pytest.raises(ValueError):
        SmokeSpec(url=ENSEMBLE.url, lora_task_id=0)  # 0 is "no LoRA"
    with pytest.raises(InvalidInputError, match="--lora-path .* is missing"):
        plan_checks(SmokeSpec(url=LLMAPI.url, lora_task_id=3), LLMAPI, None)
    assert "lora" in [c.name for c in plan_checks(SmokeSpec(url=LLMAPI.url, lora_task_id=3, lora_path="/srv/a"), LLMAPI, None)]


def test_lora_check_on_the_llmapi_model_sends_lora_id_name_and_path_together():
    """The LLM-API model takes lora_id, lora_name and lora_path together (its _lora_fields); base requests send none."""
    from pipeline.clients.triton import GenerateRequest, build_llmapi_inputs

    def sent(request):
        return {t.name(): t for t in build_llmapi_inputs(request)}

    assert not {"lora_id", "lora_name", "lora_path"} & set(sent(GenerateRequest(prompt="hi")))
    inputs = sent(GenerateRequest(prompt="hi", lora_task_id=2, lora_path="/srv/lora/sql"))
    assert (inputs["lora_id"].datatype(), inputs["lora_name"].datatype(), inputs["lora_path"].datatype()) == (
        "UINT64", "BYTES", "BYTES")
    declared = frozenset({"text_input", "streaming", "sampling_param_max_tokens"})
    assert "lora_id" not in {t.name() for t in build_llmapi_inputs(GenerateRequest(prompt="hi", lora_task_id=2), declared=declared)}


def test_lora_check_over_openai_sends_trtllm_serves_lora_request(monkeypatch):
    """The OpenAI body gets lora_request (lora_name, lora_int_id, lora_path); `model` stays the base model."""
    from pipeline.clients.openai import Completion
    from pipeline.smoke import checks as smoke_checks
    from pipeline.smoke.checks import SmokeContext
    import pipeline.clients.openai as openai_client

    bodies = []
    monkeypatch.setattr(openai_client, "generate", lambda url, body, **kw: bodies.append(body) or Completion(
        text="adapted" if "lora_request" in body else "base"))
    spec = SmokeSpec(url=OPENAI.url, lora_task_id=2, lora_name="sql", lora_path="/srv/lora/sql")
    ctx = SmokeContext(spec=spec, served=OPENAI)
    ctx.greedy = ctx.call()
    passed, detail = smoke_checks.lora(ctx)
    assert passed, detail
    assert bodies[1]["lora_request"] == {"lora_name": "sql", "lora_int_id": 2, "lora_path": "/srv/lora/sql"}
    assert bodies[1]["model"] == "m" and "lora_request" not in bodies[2]

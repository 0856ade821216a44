"""`pipeline bench --lora-mix`: the mix parsed and refused when wrong, requests shared out exactly, each class's
TTFT/TPOT/throughput and its cost against base (on virtual time, tests/bench_fakes.py), the adapter sent the way
each server takes it (Triton: lora_task_id; trtllm-serve: lora_request), and the reports."""

from __future__ import annotations

import json
import pytest

from bench_fakes import FakeTransport, Script, VirtualTime, WhitespaceTokenizer, requests
from pipeline.bench.lora_mix import LoraClass, assign, parse_lora_mix, resolve_classes
from pipeline.bench.spec import BenchSpec
from pipeline.core.errors import InvalidInputError


def test_parse_and_refuse():
    assert parse_lora_mix("sql=0.5,chat=0.3,base=0.2") == (("sql", 0.5), ("chat", 0.3), ("base", 0.2))
    for bad, needle in (("sql=0.5,base=0.4", "sum to 0.9"), ("sql=x", "not a fraction"), ("sql=0.5,sql=0.5", "once"),
                        ("0=0.5,base=0.5", "task id 0"), ("sql=-1,base=2", "above 0")):
        with pytest.raises(InvalidInputError, match=needle):
            parse_lora_mix(bad)


def test_names_resolve_from_the_deployment_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"lora": {"task_ids": {"sql": 1, "chat": 2}, "adapters": [
        {"name": "sql", "task_id": 1}, {"name": "chat", "task_id": 2}]}}))
    classes = resolve_classes((("sql", 0.5), ("7", 0.25), ("base", 0.25)), tmp_path)
    assert [(c.name, c.task_id) for c in classes] == [("sql", 1), ("7", 7), ("base", None)]
    assert classes[0].path == str(tmp_path / "lora" / "sql")
    with pytest.raises(InvalidInputError, match="not a task id"):
        resolve_classes((("nope", 1.0),), tmp_path)


def test_assign_shares_exactly_and_interleaves():
    classes = (LoraClass("sql", 0.5, 1), LoraClass("chat", 0.3, 2), LoraClass("base", 0.2))
    out = assign(requests(20), classes, seed=3)
    names = [r.adapter for r in out]
    assert (names.count("sql"), names.count("chat"), names.count("base")) == (10, 6, 4)
    assert names[:10] != ["sql"] * 10
    assert {r.lora_task_id for r in out if r.adapter == "chat"} == {2} and {r.lora_task_id for r in out if r.adapter == "base"} == {None}


def test_each_class_is_measured_against_base():
    """Adapter requests take 3x the TTFT and 2x the gap between tokens of base requests: the report says so."""
    from pipeline.bench.runner import Runner
    from pipeline.bench.session import BenchResult, LevelDriver, measure

    vt = VirtualTime()
    slow = lambda r: Script(ttft=0.3, gap=0.04) if r.adapter != "base" else Script(ttft=0.1, gap=0.02)  # noqa: E731
    transport = FakeTransport(vt, script=slow)
    spec = BenchSpec(url="fake:1", concurrency=(2,), requests=20, warmup=0, lora_mix=(("sql", 0.5), ("base", 0.5)))
    pool = assign(requests(20), (LoraClass("sql", 0.5, 1), LoraClass("base", 0.5)), seed=0)
    result = BenchResult(spec=spec, served_model="fake", tokenizer_dir=None)
    runner = Runner(transport, clock=vt.clock, sleep=vt.sleep, wall_ns=lambda: int(vt.now * 1e9))
    vt.run(measure(spec, LevelDriver(runner, None), WhitespaceTokenizer(), pool, result))
    adapters = result.levels[0]["adapters"]
    assert adapters["sql"]["requests"] == adapters["base"]["requests"] == 10
    assert adapters["sql"]["ttft_ms"]["p50"] == pytest.approx(300.0) and adapters["base"]["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert adapters["sql"]["vs_base"]["ttft_p50"] == pytest.approx(3.0)
    assert adapters["sql"]["vs_base"]["tpot_p50"] == pytest.approx(2.0)
    assert adapters["sql"]["vs_base"]["output_tok_s_per_user"] < 1
    assert "vs_base" not in adapters["base"]
    from pipeline.bench.report import markdown

    assert "## LoRA adapters against base requests" in markdown(result)


def test_adapter_reaches_the_server_as_each_api_takes_it():
    from pipeline.bench.openai_transport import OpenAITransport
    from pipeline.bench.transport import ModelInfo, build_request_inputs

    request = assign(requests(1), (LoraClass("sql", 1.0, 3, "/models/lora/sql"),))[0]
    info = ModelInfo(name="ensemble", inputs=frozenset({"text_input", "max_tokens", "lora_task_id"}), batched=True)
    inputs = {i.name(): i for i in build_request_inputs(request, info, perf_metrics=False)}
    assert inputs["lora_task_id"].datatype() == "UINT64" and inputs["lora_task_id"].shape() == [1, 1]
    assert "lora_weights" not in inputs  # the deployment prefetched the weights: the id alone
    body = OpenAITransport("http://x:8000/v1", "base-model").body(request)
    assert body["lora_request"] == {"lora_name": "sql", "lora_int_id": 3, "lora_path": "/models/lora/sql"}
    assert body["model"] == "base-model"  # trtllm-serve: `model` stays the base model
    base = assign(requests(1), (LoraClass("base", 1.0),))[0]
    assert "lora_request" not in OpenAITransport("http://x:8000/v1", "m").body(base)
    assert "lora_task_id" not in {i.name() for i in build_request_inputs(base, info, perf_metrics=False)}


def test_cli_refuses_a_bad_mix_with_exit_2(capsys):
    from pipeline.cli import run

    assert run(["bench", "--url", "127.0.0.1:1", "--lora-mix", "sql=0.7,base=0.2"]) == 2
    assert "sum to 0.9" in capsys.readouterr().err

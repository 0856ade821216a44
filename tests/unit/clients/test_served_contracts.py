"""The client side of the three served contracts, without a server: --url forms, SSE parsing, OpenAI events,
contract detection from a model's tensor names, and how bench counts tokens the server reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.clients.openai import Sampling, SseParser, error_message, parse_event, parse_url, request_body

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("url, kind, normal", [
    ("localhost:8001", "grpc", "localhost:8001"),
    ("127.0.0.1:9", "grpc", "127.0.0.1:9"),
    ("[::1]:8001", "grpc", "[::1]:8001"),
    ("http://127.0.0.1:8000/v1", "openai", "http://127.0.0.1:8000/v1"),
    ("https://llm.example:443/v1/", "openai", "https://llm.example:443/v1"),
    ("http://localhost/v1", "openai", "http://localhost/v1"),
])
def test_url_forms(url, kind, normal) -> None:
    parsed = parse_url(url)
    assert (parsed.kind, parsed.url) == (kind, normal)


@pytest.mark.parametrize("url", ["localhost", "http://localhost:8000", "http://localhost:8000/v2", "ftp://h:1/v1",
                                 "grpc://h:8001", "", "h:port"])
def test_other_urls_are_refused_naming_both_forms(url) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_url(url)
    assert "HOST:PORT" in caught.value.hint and "http(s)://HOST:PORT/v1" in caught.value.hint


def test_sse_parser_joins_split_events_and_lines() -> None:
    parser = SseParser()
    stream = b'data: {"a": 1}\r\n\r\n: keep-alive comment\n\ndata: first\ndata:second\n\nevent: x\nid: 3\ndata: [DONE]\n\n'
    events = []
    for i in range(0, len(stream), 7):  # arbitrary network chunking
        events += parser.feed(stream[i:i + 7])
    assert events == ['{"a": 1}', "first\nsecond", "[DONE]"]
    assert parser.close() == []


def test_sse_parser_flushes_a_last_event_without_blank_line() -> None:
    parser = SseParser()
    assert parser.feed("data: tail") == []
    assert parser.close() == ["tail"]


def test_openai_events_as_trtllm_serve_and_transformers_serve_send_them() -> None:
    # transformers serve 5.24 (chat): role chunk, content chunks, a final chunk with finish_reason and usage
    role = parse_event('{"choices":[{"delta":{"role":"assistant"},"index":0}],"object":"chat.completion.chunk"}')
    assert role.text == "" and role.finish_reason is None and role.completion_tokens is None
    assert parse_event('{"choices":[{"delta":{"content":" Paris"},"index":0}]}').text == " Paris"
    last = parse_event('{"choices":[{"delta":{},"index":0,"finish_reason":"stop"}],'
                       '"usage":{"completion_tokens":8,"prompt_tokens":37,"total_tokens":45}}')
    assert (last.finish_reason, last.completion_tokens, last.prompt_tokens) == ("stop", 8, 37)
    # include_usage (trtllm-serve, OpenAI): a last chunk with empty choices and the usage
    assert parse_event('{"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":5}}').completion_tokens == 4
    # /v1/completions chunks carry choices[].text; whole responses carry message.content
    assert parse_event('{"choices":[{"text":" is","index":0}]}').text == " is"
    assert parse_event('{"choices":[{"message":{"content":"Paris."},"finish_reason":"stop"}]}').text == "Paris."
    assert parse_event("[DONE]").done
    # errors: transformers serve's in-stream error, trtllm-serve's ErrorResponse, FastAPI's detail
    assert parse_event('{"error": "CB worker died"}').error == "CB worker died"
    assert error_message({"object": "error", "message": "prompt length 9000 exceeds max_seq_len 8192", "code": 400}) \
        == "prompt length 9000 exceeds max_seq_len 8192"
    assert error_message({"detail": "Unexpected fields in the request: {'min_tokens'}"}).startswith("Unexpected fields")
    assert parse_event("not json").error.startswith("not JSON")


def test_request_bodies() -> None:
    chat = request_body("m", "Hello", endpoint="chat", max_tokens=4, stream=True, sampling=Sampling(stop=(" am",)))
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": True,
                    "stream_options": {"include_usage": True}, "temperature": 0.0, "stop": [" am"]}
    text = request_body(None, "Hello", endpoint="completions", max_tokens=2, stream=False,
                        sampling=Sampling(temperature=None, min_tokens=2))
    assert text == {"prompt": "Hello", "max_tokens": 2, "stream": False, "min_tokens": 2}


def _pbtxt_names(path: Path) -> tuple[set[str], set[str]]:
    """input and output tensor names of a config.pbtxt (its `input [...]` and `output [...]` blocks)."""
    import re

    text = re.sub(r"#.*", "", path.read_text(encoding="utf-8"))
    blocks = {}
    for kind in ("input", "output"):
        start = re.search(rf"^{kind}\s*\[", text, re.M)
        depth, i = 0, start.end() - 1
        for i in range(start.end() - 1, len(text)):
            depth += {"[": 1, "]": -1}.get(text[i], 0)
            if depth == 0:
                break
        blocks[kind] = set(re.findall(r'name:\s*"([^"]+)"', text[start.end():i]))
    return blocks["input"], blocks["output"]


def test_contract_detection_reads_tensor_names() -> None:
    from pipeline.clients.contract import classify_triton

    # NVIDIA's ensemble (the repository render writes for an engine) and the C++ backend's token model
    ensemble_in, ensemble_out = _pbtxt_names(REPO / "model_repo_templates" / "ensemble" / "config.pbtxt.j2")
    assert classify_triton(ensemble_in, ensemble_out) == "triton-ensemble"
    llm_in, llm_out = _pbtxt_names(REPO / "model_repo_templates" / "tensorrt_llm" / "config.pbtxt.j2")
    assert classify_triton(llm_in, llm_out) is None
    # TensorRT-LLM's LLM-API model, tensor names as in triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt
    # @c8c6df08 (a name is not enough: the same model name with the C++ backend's tensors is not this contract)
    upstream_inputs = {"text_input", "streaming", "sampling_param_best_of", "sampling_param_temperature",
                       "sampling_param_top_k", "sampling_param_top_p", "sampling_param_frequency_penalty",
                       "sampling_param_presence_penalty", "sampling_param_max_tokens", "sampling_param_stop",
                       "sampling_param_seed", "sampling_param_exclude_input_from_output",
                       "sampling_param_return_perf_metrics", "return_finish_reason", "return_stop_reason",
                       "return_cumulative_logprob", "stop"}
    upstream_outputs = {"text_output", "finish_reason", "stop_reason", "cumulative_logprob", "kv_cache_reused_block",
                        "arrival_time_ns", "first_token_time_ns"}
    assert classify_triton(upstream_inputs, upstream_outputs) == "triton-llmapi"
    assert classify_triton(upstream_inputs, {"text_output"}) is None  # no finish_reason: not the LLM-API contract
    assert classify_triton({"text_input", "streaming"}, upstream_outputs) is None


def test_llmapi_repository_template_speaks_the_detected_contract() -> None:
    """The LLM-API repository `pipeline render` writes (model_repo_templates/llmapi) is detected as such."""
    from pipeline.clients.contract import classify_triton

    template = REPO / "model_repo_templates" / "llmapi" / "tensorrt_llm" / "config.pbtxt.j2"
    assert template.is_file(), f"{template} is gone: the LLM-API repository render writes needs it"
    assert classify_triton(*_pbtxt_names(template)) == "triton-llmapi"


def test_llmapi_inputs_follow_the_model_shape() -> None:
    from pipeline.clients.triton import GenerateRequest, build_llmapi_inputs

    request = GenerateRequest(prompt="Hi", max_tokens=3, stream=True, stop_words=(" a", " b"), temperature=0.5)
    flat = {i.name(): i.shape() for i in build_llmapi_inputs(request)}
    assert flat == {"text_input": [1], "streaming": [1], "sampling_param_stop": [2], "sampling_param_max_tokens": [1],
                    "sampling_param_temperature": [1], "sampling_param_exclude_input_from_output": [1],
                    "return_finish_reason": [1]}
    batched = {i.name(): i.shape() for i in build_llmapi_inputs(request, batched=True,
                                                                declared=frozenset({"text_input", "streaming",
                                                                                    "sampling_param_max_tokens"}))}
    assert batched == {"text_input": [1, 1], "streaming": [1, 1], "sampling_param_stop": [1, 2],
                       "sampling_param_max_tokens": [1, 1]}


class _Tensorless:
    """The two methods of tritonclient's InferResult that collect_llmapi_response reads."""

    def __init__(self, text: str, finish: str) -> None:
        import numpy as np

        self.values = {"text_output": np.array([text.encode()], dtype=object),
                       "finish_reason": np.array([finish.encode()], dtype=object)}

    def as_numpy(self, name):
        return self.values.get(name)


def test_llmapi_streamed_text_is_cumulative() -> None:
    from pipeline.clients.triton import GenerateResult, collect_llmapi_response

    result, raw = GenerateResult(), []
    for text, finish in (("The", "None"), ("The cap", "None"), ("The capital", "length")):
        collect_llmapi_response(_Tensorless(text, finish), result, raw)
    assert result.chunks == ["The", " cap", "ital"] and result.responses == 3
    assert b"".join(raw).decode() == "The capital" and result.finish_reason == "length"


def test_bench_counts_the_servers_tokens_and_keeps_usage_untimed() -> None:
    """An OpenAI stream's usage event is no token: TTFT/TPOT come from text events only, OSL and ISL from usage."""
    from bench_fakes import VirtualTime, WhitespaceTokenizer, requests
    from pipeline.bench.runner import Load, Runner
    from pipeline.bench.session import finish_level
    from pipeline.bench.transport import Chunk, Usage

    time = VirtualTime()

    class Transport:
        async def stream(self, request):
            for word in ("a", " b", " c"):
                await time.sleep(0.1)
                yield word, None
            await time.sleep(5.0)  # usage arrives late: it must not stretch the latency
            yield Usage(completion_tokens=4, prompt_tokens=40), None

        def decode(self, payload):
            return Chunk(text=payload)

    runner = Runner(Transport(), clock=time.clock, sleep=time.sleep)
    run = time.run(runner.run(Load(concurrency=1, requests=1), iter(requests(1))))
    (record,) = run.records
    assert record.text == "a b c" and record.output_tokens == 4 and record.isl == 40
    assert len(record.chunk_t) == 3 and record.last_t - record.send_t == pytest.approx(0.3)
    summary, (metrics,) = finish_level(run, WhitespaceTokenizer())
    assert metrics.osl == 4  # the server's count, not the 3 words the tokenizer sees
    assert metrics.tpot_ms == pytest.approx((300 - 100) / 3)


def test_bench_replaces_cumulative_text() -> None:
    from bench_fakes import VirtualTime, requests
    from pipeline.bench.runner import Load, Runner
    from pipeline.bench.transport import Chunk

    time = VirtualTime()

    class Transport:
        async def stream(self, request):
            for text in ("x", "x y", "x y z"):
                await time.sleep(0.1)
                yield text, None

        def decode(self, payload):
            return Chunk(text=payload, replace=True)

    run = time.run(Runner(Transport(), clock=time.clock, sleep=time.sleep).run(Load(concurrency=1, requests=1),
                                                                                 iter(requests(1))))
    assert run.records[0].text == "x y z"


def test_openai_smoke_and_bench_refuse_bad_urls_before_any_work(capsys) -> None:
    from pipeline import cli

    for command in (["smoke", "--url", "localhost"], ["bench", "--url", "http://localhost:8000/api"]):
        assert cli.run(command) == 2
        err = capsys.readouterr().err
        assert "HOST:PORT" in err and "http(s)://HOST:PORT/v1" in err


def test_unanswering_openai_server_is_a_clear_error(capsys) -> None:
    from pipeline import cli
    from pipeline.serve import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    assert cli.run(["bench", "--url", url]) == 1
    assert f"The OpenAI-compatible server at {url} does not answer GET /v1/models" in capsys.readouterr().err
    assert cli.run(["smoke", "--url", url, "--json"]) == 4
    report = json.loads(capsys.readouterr().out)
    assert report["checks"][0]["name"] == "live_ready" and "does not answer" in report["checks"][0]["detail"]

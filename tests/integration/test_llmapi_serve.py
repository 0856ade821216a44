"""`pipeline serve` of a Triton LLM-API repository on the CPU, for real: a CPU PyTorch-backend deployable of the
demo model, rendered into NVIDIA's LLM-API layout, served by tritonserver (nvidia-pytriton) with the reference
runtime behind the contract, warmed up through that contract, and asked with tritonclient."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmapi_helpers import build_cpu_deployable  # noqa: E402

pytestmark = pytest.mark.server

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def llmapi_server(demo_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    build = tmp_path_factory.mktemp("llmapi") / "build"
    deployable = build_cpu_deployable(demo_hf_dir)
    repo = render(RenderSpec(engine=deployable, out=build / "repo")).repo
    spec = ServerSpec(repo=repo, log_file=build / "logs" / "llmapi-tritonserver.log", ready_timeout_s=600,
                      exit_timeout_s=5)
    with start_server(spec) as server:
        yield server


def ask(server, prompt: str = PROMPT, **options):
    """One request through the LLM-API contract, the way serve's warm-up sends it (pipeline.clients.triton)."""
    from pipeline.clients.triton import GenerateRequest, generate
    from pipeline.clients.llmapi import LLMAPI_OPTIONS, MODEL

    return generate(server.grpc_url, MODEL, GenerateRequest(prompt=prompt, **options), llmapi=LLMAPI_OPTIONS)


def test_streaming_and_whole_answers_agree(llmapi_server) -> None:
    whole = ask(llmapi_server, max_tokens=8, stream=False)
    streamed = ask(llmapi_server, max_tokens=8, stream=True)
    assert whole.error is None and streamed.error is None
    assert "Paris" in whole.text and whole.finish_reason == "length" and whole.responses == 1
    assert streamed.finish_reason == "length" and streamed.text == whole.text  # greedy: the same tokens
    assert streamed.responses > 1
    # upstream semantics: each streamed text_output is the text so far, so every response extends the last
    # one, and the additions the client folds out of them join to the final text
    assert "".join(streamed.chunks) == streamed.text


def test_prompt_is_echoed_unless_excluded(llmapi_server) -> None:
    echoed = ask(llmapi_server, max_tokens=4, exclude_input_in_output=False)
    assert echoed.error is None and echoed.text.startswith(PROMPT) and "Paris" in echoed.text


def test_stop_string_ends_the_answer_before_it(llmapi_server) -> None:
    answer = ask(llmapi_server, max_tokens=16, stream=True, stop_words=(".",))
    assert answer.error is None and answer.finish_reason == "stop"
    assert "Paris" in answer.text and "." not in answer.text


def test_bad_request_is_an_error_naming_the_input(llmapi_server) -> None:
    answer = ask(llmapi_server, max_tokens=0)
    assert answer.error is not None and "sampling_param_max_tokens" in answer.error


def test_streamed_text_never_holds_the_prompt(llmapi_server) -> None:
    """As on a GPU (llmRequest.cpp @119c6e60 calculateNbTokensOut): exclude_input_from_output false keeps the
    prompt in a whole answer only."""
    whole = ask(llmapi_server, max_tokens=4, exclude_input_in_output=False)
    streamed = ask(llmapi_server, max_tokens=4, stream=True, exclude_input_in_output=False)
    assert whole.error is None and streamed.error is None and whole.text.startswith(PROMPT)
    # each streamed text_output is the text so far: none holds the prompt when the last does not
    assert streamed.text == whole.text[len(PROMPT):] and PROMPT not in streamed.text


def test_without_streaming_a_stop_string_in_the_kept_prompt_ends_the_text(llmapi_server) -> None:
    """The LLM API looks for stop strings in CompletionOutput.text, which holds the prompt when it is kept."""
    whole = ask(llmapi_server, max_tokens=4, exclude_input_in_output=False, stop_words=("capital",))
    assert whole.error is None and whole.text == "The " and whole.finish_reason == "stop"
    streamed = ask(llmapi_server, max_tokens=4, stream=True, exclude_input_in_output=False, stop_words=("capital",))
    assert streamed.error is None and "Paris" in streamed.text and streamed.finish_reason == "length"


def test_a_cancelled_whole_request_frees_its_slot(llmapi_server) -> None:
    """A client that gives up on a non-streamed request: the model's cancellation poll aborts the generation
    within a few periods (the engine logs the release of its batch slot and KV blocks), long before its
    max_tokens would end it."""
    import re
    import time
    import uuid

    import numpy as np
    import tritonclient.grpc as grpcclient

    log = llmapi_server.log_file
    # the engine logs a cancelled request's end either way: "ended (cancelled) after N tokens" once running, or
    # "ended (cancelled) while waiting for a batch slot" (pipeline/reference_runtime/engine.py)
    cancelled = re.compile(r"ended \(cancelled\)(?: after (\d+) tokens)?")
    before = len(cancelled.findall(log.read_text(errors="replace")))
    client = grpcclient.InferenceServerClient(llmapi_server.grpc_url)
    inputs = []
    for name, array in (("text_input", np.array([PROMPT.encode()], dtype=np.object_)),
                        ("streaming", np.array([False])), ("sampling_param_max_tokens", np.array([400], dtype=np.int32))):
        tensor = grpcclient.InferInput(name, list(array.shape), "BYTES" if array.dtype == np.object_ else
                                       ("BOOL" if array.dtype == bool else "INT32"))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client.start_stream(callback=lambda result, error: None)
    client.async_stream_infer("tensorrt_llm", inputs, request_id=uuid.uuid4().hex[:12])
    # cancel once the model holds the request (its in-flight gauge), not after a fixed sleep: on a loaded machine
    # the request may not have reached the model yet, and Triton drops a request cancelled before that
    deadline = time.monotonic() + 30
    while _in_flight(llmapi_server) < 1:
        assert time.monotonic() < deadline, "the request never reached the model"
        time.sleep(0.1)
    time.sleep(0.5)
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ended = cancelled.findall(log.read_text(errors="replace"))
        if len(ended) > before:
            break
        time.sleep(0.2)
    assert len(ended) > before, "the cancelled request was not aborted within 10 s"
    assert _in_flight(llmapi_server) == 0  # its slot is free again
    assert ended[-1] == "" or int(ended[-1]) < 400  # aborted, not run to its max_tokens


def _in_flight(server) -> float:
    """The LLM-API model's pipeline_requests_in_flight gauge (accepted, not yet finally answered)."""
    import urllib.request

    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:  # noqa: S310 (local URL)
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("pipeline_requests_in_flight{") and 'model="tensorrt_llm"' in line)


def test_smoke_lora_check_passes_on_the_llmapi_model(llmapi_server, demo_hf_dir, tmp_path, capsys) -> None:
    """smoke --lora-task-id N --lora-path DIR on the LLM-API model: it sends lora_id, lora_name and lora_path
    together; the adapter (a PEFT folder on the server, converted by the CPU model once per lora_id) answers
    differently from base, and base is unchanged after it."""
    from lora_cases import ATTENTION, make_adapter, smoke_lora

    adapter = make_adapter(demo_hf_dir, tmp_path / "sql", rank=8, targets=ATTENTION, scale=0.2)
    smoke_lora(llmapi_server.grpc_url, "--lora-name", "sql", "--lora-path", str(adapter), "--skip", "too_long_prompt",
               capsys=capsys)

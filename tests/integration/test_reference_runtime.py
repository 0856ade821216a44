"""The reference runtime's request semantics, through a real tritonserver and NVIDIA-style inputs."""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest

from pipeline.clients.triton import GenerateRequest, build_inputs, generate, is_final

pytestmark = [pytest.mark.triton, pytest.mark.slow]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def tokenizer(demo_engine):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_engine / "tokenizer")


@pytest.fixture(scope="module")
def greedy(demo_server):
    result = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=12)
    assert result.ok and result.text.strip(), result.error
    return result


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_streamed_text_equals_whole_text(demo_server, greedy, model) -> None:
    streamed = generate(demo_server.grpc_url, model, PROMPT, max_tokens=12, stream=True)
    assert streamed.ok, streamed.error
    assert streamed.responses >= 2
    assert streamed.text == greedy.text
    assert "".join(streamed.chunks) == greedy.text


def test_exclude_input_in_output(demo_server, greedy) -> None:
    whole = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=12, exclude_input_in_output=False)
    assert whole.text == PROMPT + greedy.text


def test_end_id_and_min_tokens(demo_server, greedy, tokenizer) -> None:
    ids = tokenizer.encode(greedy.text, add_special_tokens=False)
    end_id = ids[1]  # the greedy output's second token ends the request early
    stopped = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=12, end_id=end_id)
    assert stopped.ok and stopped.output_tokens == 1
    assert stopped.text == tokenizer.decode(ids[:1])
    held = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=12, end_id=end_id, min_tokens=4)
    assert held.output_tokens >= 4


def test_bad_words_change_the_output(demo_server, greedy) -> None:
    first_word = greedy.text.split()[0].strip(".,")
    banned = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=12, bad_words=(" " + first_word,))
    assert banned.ok and not banned.text.startswith(" " + first_word)


def test_seeded_sampling_repeats(demo_server) -> None:
    def sample(seed):
        return generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=10, top_k=50, top_p=0.95,
                        temperature=1.2, seed=seed).text

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3)}) > 1


def test_log_probs_and_perf_metrics(demo_server) -> None:
    result = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=8, return_log_probs=True,
                      return_perf_metrics=True)
    assert result.ok, result.error
    assert len(result.output_log_probs) == result.output_tokens == 8
    assert all(lp <= 0 for lp in result.output_log_probs)
    assert result.cum_log_probs == pytest.approx(sum(result.output_log_probs), rel=1e-5)
    times = [result.perf[k] for k in ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns",
                                      "last_token_time_ns")]
    assert times == sorted(times) and times[0] > 0


def test_unsupported_input_is_refused_by_name(demo_server) -> None:
    import tritonclient.grpc as grpcclient

    inputs = build_inputs(GenerateRequest(prompt=PROMPT, max_tokens=4))
    penalty = grpcclient.InferInput("repetition_penalty", [1, 1], "FP32")
    penalty.set_data_from_numpy(np.array([[1.3]], dtype=np.float32))
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(demo_server.grpc_url)
    client.start_stream(callback=lambda result=None, error=None: events.put((result, error)))
    client.async_stream_infer("ensemble", inputs + [penalty])
    _, error = events.get(timeout=120)
    client.stop_stream()
    client.close()
    assert error is not None and "repetition_penalty" in str(error) and "not supported" in str(error)


def test_client_disconnect_cancels_the_request(demo_server) -> None:
    """A BLS client that goes away: the BLS model sends `stop` for its tensorrt_llm request, which the
    reference runtime cancels in the batching manager (freeing the slot and its KV blocks). Triton 2.51
    does not forward a client's cancellation into ensemble steps, so this goes through BLS."""
    import tritonclient.grpc as grpcclient

    def cancelled_lines() -> int:
        return demo_server.log_file.read_text(errors="replace").count("ended (cancelled)")

    before = cancelled_lines()
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(demo_server.grpc_url)
    client.start_stream(callback=lambda result=None, error=None: events.put((result, error)))
    client.async_stream_infer("tensorrt_llm_bls", build_inputs(GenerateRequest(
        prompt="Tell a long story.", max_tokens=400, stream=True, min_tokens=400)))
    for _ in range(2):
        result, error = events.get(timeout=120)
        assert error is None and not is_final(result)
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and cancelled_lines() == before:
        time.sleep(0.5)
    assert cancelled_lines() == before + 1
    assert generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=2).ok  # still serving

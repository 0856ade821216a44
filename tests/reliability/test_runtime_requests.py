"""The reference runtime under requests that go wrong, and under KV-cache pressure, seen through its
own metrics (nv_trt_llm_request_metrics / nv_trt_llm_kv_cache_block_metrics on :8002/metrics).

- two requests with the same client request id: each is served on its own (the same tokens as alone);
  a stop with that id cancels both; a request with another id running beside them is untouched;
- a stop for an id nothing carries: an error naming the id, nothing else disturbed; a stop without an id:
  the C++ backend's error;
- a client killed mid-stream: its request is cancelled, the request beside it finishes;
- afterwards every batch slot and KV block is back (active 0, waiting 0, KV used 0).

`tight_server`: the demo engine rendered with max_tokens_in_paged_kv_cache 256 (8 blocks of 32) and
--no-decoupled: requests needing 2 blocks each queue 4 at a time (guaranteed_no_evict) and all finish,
a request larger than the whole cache is refused at once, and a stop reaches a running request though
the model answers whole responses (execute does not wait for the batch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reliability_helpers import runtime_metrics, wait_busy

from llm_stream import LlmStream, llm_generate, llm_inputs, stop_inputs

pytestmark = pytest.mark.server

TIGHT_KV_TOKENS = 256  # 8 blocks of 32 tokens
PROMPT_IDS = list(range(1000, 1020))  # 20 tokens; + 40 generated = 60 tokens = 2 blocks


def wait_idle(server, timeout_s: float = 120.0) -> dict[str, float]:
    """The runtime's metrics once nothing runs or waits and every KV block is free (fails after timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = runtime_metrics(server)
        if metrics["active"] == 0 and metrics["waiting"] == 0 and metrics["kv_used"] == 0:
            return metrics
        if time.monotonic() > deadline:
            raise AssertionError(f"the runtime did not come back to idle within {timeout_s:.0f} s: {metrics}")
        time.sleep(0.1)


def greedy_alone(url: str, ids: list[int], max_tokens: int) -> list[int]:
    result = llm_generate(url, ids, max_tokens)
    assert result.ok, result.error
    return result.tokens


def test_same_request_id_twice_each_served_and_one_stop_cancels_both(demo_server) -> None:
    url = demo_server.grpc_url
    wait_idle(demo_server)
    prompts = [list(range(2000, 2012)), list(range(3000, 3016))]
    alone = [greedy_alone(url, ids, 12) for ids in prompts]
    bystander_ids = list(range(4000, 4010))
    bystander_alone = greedy_alone(url, bystander_ids, 24)

    # two requests with one id (different prompts) at the same time: each gets its own tokens
    streams = [LlmStream(url) for _ in prompts]
    try:
        for stream, ids in zip(streams, prompts):
            stream.send(llm_inputs(ids, 12, streaming=True), "same-id")
        served = [stream.finish() for stream in streams]
    finally:
        for stream in streams:
            stream.close()
    assert [result.error for result in served] == [None, None]
    assert [result.tokens for result in served] == alone
    assert "request id 'same-id' is already in use" in demo_server.log_file.read_text(errors="replace")

    # both running under one id, a bystander beside them: a stop with the id ends both, not the bystander
    streams = [LlmStream(url) for _ in range(4)]
    try:
        for stream, ids in zip(streams, prompts):
            stream.send(llm_inputs(ids, 300, streaming=True, min_tokens=300), "twice")
        streams[2].send(llm_inputs(bystander_ids, 24, streaming=True, min_tokens=24), "bystander")
        firsts = [stream.next_chunk(timeout_s=300) for stream in streams[:2]]  # both are decoding
        assert [first.error for first in firsts] == [None, None]
        wait_busy(demo_server, active=2, kv_used=2)  # what the stop must give back, so wait_idle below means it did
        started = time.monotonic()
        streams[3].send(stop_inputs(), "twice")
        stop = streams[3].finish(timeout_s=60)
        stopped = [stream.finish(timeout_s=60) for stream in streams[:2]]
        stop_s = time.monotonic() - started
        bystander = streams[2].finish(timeout_s=300)
    finally:
        for stream in streams:
            stream.close()
    assert stop.error is None and stop.tokens == []
    assert [result.error for result in stopped] == [None, None]
    assert all(len(first.tokens + rest.tokens) < 300 for first, rest in zip(firsts, stopped)), stopped
    assert stop_s < 30, f"the stopped requests took {stop_s:.1f} s to end"
    assert bystander.error is None and bystander.tokens == bystander_alone
    wait_idle(demo_server, timeout_s=30)  # ... and gave every one back: KV used 0, nothing active or waiting


def test_stop_for_an_unknown_id_says_so_and_disturbs_nothing(demo_server) -> None:
    url = demo_server.grpc_url
    wait_idle(demo_server)
    ids = list(range(5000, 5012))
    expected = greedy_alone(url, ids, 16)
    stream, control = LlmStream(url), LlmStream(url)
    try:
        stream.send(llm_inputs(ids, 16, streaming=True, min_tokens=16), "running-one")
        first = stream.next_chunk(timeout_s=300)  # it is running: its first tokens arrived
        assert first.error is None, first.error
        control.send(stop_inputs(), "never-sent-7f3a")
        unknown = control.finish(timeout_s=60).error
        control.send(stop_inputs(), "")
        no_id = control.finish(timeout_s=60).error
        rest = stream.finish(timeout_s=300)
    finally:
        stream.close()
        control.close()
    assert unknown is not None and "no running request has id 'never-sent-7f3a'" in unknown, unknown
    assert "nothing was cancelled" in unknown
    assert no_id is not None and "request ID is not provided" in no_id, no_id
    # the running request was not disturbed: its whole answer is the one it gets alone
    assert rest.error is None
    assert first.tokens + rest.tokens == expected
    wait_idle(demo_server)


_STREAMER = """
import sys
sys.path.insert(0, sys.argv[3])
from llm_stream import LlmStream, llm_inputs
url, n = sys.argv[1], int(sys.argv[2])
stream = LlmStream(url)
stream.send(llm_inputs(list(range(6000, 6016)), n, min_tokens=n), "goes-away")
while True:
    stream.next_chunk(timeout_s=600)
    print("event", flush=True)
"""


def test_client_killed_mid_stream_frees_its_slot_and_blocks(demo_server) -> None:
    url = demo_server.grpc_url
    wait_idle(demo_server)
    bystander_ids = list(range(7000, 7012))
    expected = greedy_alone(url, bystander_ids, 24)
    cancelled_before = demo_server.log_file.read_text(errors="replace").count("ended (cancelled)")
    tests_dir = str(Path(__file__).resolve().parents[1])  # where llm_stream is
    child = subprocess.Popen([sys.executable, "-c", _STREAMER, url, "400", tests_dir], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    stream = LlmStream(url)
    try:
        for _ in range(2):  # the child's request is decoding
            assert child.stdout.readline().startswith("event"), "the streaming client never got a response"
        busy = runtime_metrics(demo_server)
        assert busy["active"] >= 1 and busy["kv_used"] >= 1, busy
        stream.send(llm_inputs(bystander_ids, 24, streaming=True, min_tokens=24), "stays")
        os.killpg(child.pid, signal.SIGKILL)  # the client goes away without a word
        child.wait(timeout=30)
        bystander = stream.finish(timeout_s=300)
    finally:
        stream.close()
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert bystander.error is None and bystander.tokens == expected
    wait_idle(demo_server, timeout_s=60)  # the 400-token request would have held its slot for minutes
    log = demo_server.log_file.read_text(errors="replace")
    assert log.count("ended (cancelled)") == cancelled_before + 1


@pytest.fixture(scope="module")
def tight_server(demo_engine: Path, session_build_root: Path):
    """The demo engine with a 256-token KV cache (8 blocks of 32), whole responses (--no-decoupled)."""
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    repo = render(RenderSpec(engine=demo_engine, runtime="reference", decoupled=False,
                             max_tokens_in_paged_kv_cache=TIGHT_KV_TOKENS,
                             out=session_build_root / "reliability" / "tight-kv-repo")).repo
    spec = ServerSpec(repo=repo, log_file=session_build_root / "logs" / "tight-kv-tritonserver.log",
                      ready_timeout_s=600, warmup=True, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server


def _infer(url: str, inputs: list, request_id: str, results: dict, key) -> None:
    """A whole-response request (the stream API, as pipeline.clients.triton.generate uses for both policies)."""
    stream = LlmStream(url)
    try:
        stream.send(inputs, request_id)
        results[key] = stream.finish(300, prompt_len=len(PROMPT_IDS))
    finally:
        stream.close()


def test_kv_pressure_queues_requests_and_every_one_finishes(tight_server) -> None:
    url = tight_server.grpc_url
    idle = wait_idle(tight_server)
    assert idle["kv_max"] == TIGHT_KV_TOKENS // 32 and idle["max"] == 8, idle
    log = tight_server.log_file.read_text(errors="replace")
    assert f"KV cache 8 blocks x 32 tokens = 256 tokens" in log and "max_tokens_in_paged_kv_cache 256" in log
    assert "ignores enable_chunked_context false" in log  # settings it does not act on are named at load

    # larger than the whole cache (20 + 300 tokens): refused at once, by name
    too_big: dict = {}
    _infer(url, llm_inputs(PROMPT_IDS, 300, streaming=False), "too-big", too_big, 0)
    assert too_big[0].error is not None and "more than this runtime's whole cache (256 tokens" in too_big[0].error

    # 8 requests of 2 blocks each (8 batch slots, 8 blocks): 4 run, 4 wait, all finish
    results: dict = {}
    threads = [threading.Thread(target=_infer, args=(url, llm_inputs(PROMPT_IDS, 40, streaming=False, min_tokens=40),
                                                     f"kv-{i}", results, i)) for i in range(8)]
    for thread in threads:
        thread.start()
    samples = []
    while any(thread.is_alive() for thread in threads):
        samples.append(runtime_metrics(tight_server))
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(8))
    assert all(result.error is None and len(result.tokens) == 40 for result in results.values()), results
    assert len({tuple(result.tokens) for result in results.values()}) == 1  # the same greedy answer 8 times
    assert max(s["active"] for s in samples) == 4, samples
    assert max(s["waiting"] for s in samples) >= 1, "no request ever waited for KV-cache blocks"
    assert max(s["kv_used"] for s in samples) <= 8
    wait_idle(tight_server)


def test_stop_reaches_a_running_request_without_decoupled_mode(tight_server) -> None:
    """--no-decoupled: execute hands requests to the batch and returns, so a stop sent while a long
    request runs cancels it (it ends early with the tokens it had), and other requests still run."""
    url = tight_server.grpc_url
    wait_idle(tight_server)
    results: dict = {}
    long_run = threading.Thread(target=_infer, args=(url, llm_inputs(PROMPT_IDS, 200, streaming=False, min_tokens=200),
                                                     "long-one", results, "long"))
    long_run.start()
    deadline = time.monotonic() + 120
    while runtime_metrics(tight_server)["kv_used"] < 2 and time.monotonic() < deadline:  # decoding past its prompt
        time.sleep(0.1)
    beside = threading.Thread(target=_infer, args=(url, llm_inputs(PROMPT_IDS, 8, streaming=False), "beside",
                                                   results, "beside"))
    beside.start()
    stop: dict = {}
    time.sleep(1.0)
    _infer(url, stop_inputs(), "long-one", stop, 0)
    long_run.join(timeout=120)
    beside.join(timeout=300)
    assert stop[0].error is None, stop
    long_one = results["long"]
    assert long_one.error is None and 0 < len(long_one.tokens) < 200, (len(long_one.tokens), long_one.error)
    assert results["beside"].error is None and len(results["beside"].tokens) == 8
    wait_idle(tight_server)

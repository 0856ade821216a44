"""LoRA on the CPU server: PEFT adapters on the demo (SmolLM2-135M), converted with pipeline.convert.lora, served by
the reference runtime through tritonserver with NVIDIA's tensors; and NVIDIA's own clients, unchanged.

Served greedy output with an adapter equals PEFT's own greedy output for it, and its log-probs are within
LOGPROB_TOLERANCE of PEFT's (the same float32 numbers through the paged-attention batch: rounding only); base
requests beside them are unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llm_stream import LlmStream, llm_inputs
from lora_cases import ATTENTION, MLP, make_adapter, peft_greedy
from pipeline.clients.triton import tensor

pytestmark = [pytest.mark.triton, pytest.mark.slow]
PROMPT = "The capital of France is"
NEW = 12
LOGPROB_TOLERANCE = 1e-3
# Task ids of this module (the session's server is shared: ids other tests do not use)
TASK_A, TASK_B = 2501, 2502


@pytest.fixture(scope="module")
def tokenizer(demo_engine):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_engine / "tokenizer")


@pytest.fixture(scope="module")
def prompt_ids(tokenizer) -> list[int]:
    return tokenizer.encode(PROMPT, add_special_tokens=True)


@pytest.fixture(scope="module")
def adapters(demo_hf_dir, demo_engine, tmp_path_factory, prompt_ids):
    """name -> (PEFT folder, TrtllmLora, converted folder, PEFT's greedy (tokens, log-probs)); "base" too."""
    from pipeline.convert.lora import load_peft_adapter, to_trtllm_lora, write_trtllm_lora

    dtype = json.loads((demo_engine / "config.json").read_text())["pretrained_config"]["dtype"]
    root = tmp_path_factory.mktemp("lora")
    made = {"A": make_adapter(demo_hf_dir, root / "A", rank=8, targets=ATTENTION + MLP, seed=7, scale=0.08),
            "B": make_adapter(demo_hf_dir, root / "B", rank=16, targets=("q_proj", "v_proj", "o_proj"), alpha=8,
                              rslora=True, seed=8, scale=0.08)}
    result = {"base": (None, None, None, peft_greedy(demo_hf_dir, None, prompt_ids, NEW))}
    for name, folder in made.items():
        lora = to_trtllm_lora(load_peft_adapter(folder), dtype)
        result[name] = (folder, lora, write_trtllm_lora(lora, root / f"{name}-trtllm"),
                        peft_greedy(demo_hf_dir, folder, prompt_ids, NEW))
    for name in ("A", "B"):
        assert result[name][3][0] != result["base"][3][0], f"adapter {name} must change the greedy output"
    return result


def _lora_inputs(task: int | None, lora=None, weights_type: str = "FP32") -> list:
    inputs = [] if task is None else [tensor("lora_task_id", np.array([[task]], dtype=np.uint64), "UINT64")]
    if lora is not None:
        inputs += [tensor("lora_weights", lora.weights, weights_type), tensor("lora_config", lora.config, "INT32")]
    return inputs


def _send_all(url: str, prompt_ids: list[int], jobs: dict[str, list]) -> dict:
    """Every job at once, each on its own stream (they share the engine's batches); the results by name."""
    streams = {name: LlmStream(url) for name in jobs}
    try:
        for name, extra in jobs.items():
            streams[name].send(llm_inputs(prompt_ids, NEW, return_log_probs=True) + extra)
        return {name: stream.finish() for name, stream in streams.items()}
    finally:
        for stream in streams.values():
            stream.close()


def test_served_adapters_equal_peft_and_base_is_unchanged(demo_server, adapters, prompt_ids) -> None:
    first = _send_all(demo_server.grpc_url, prompt_ids, {
        "base": [], "A": _lora_inputs(TASK_A, adapters["A"][1]), "B": _lora_inputs(TASK_B, adapters["B"][1])})
    later = _send_all(demo_server.grpc_url, prompt_ids, {  # cached: the id alone
        "A": _lora_inputs(TASK_A), "B": _lora_inputs(TASK_B), "base": []})
    for results in (first, later):
        for name, result in results.items():
            tokens, logprobs = adapters[name][3]
            assert result.ok, f"{name}: {result.error}"
            assert result.tokens == tokens, f"{name}: served {result.tokens}, PEFT {tokens}"
            np.testing.assert_allclose(result.log_probs, logprobs, atol=LOGPROB_TOLERANCE, err_msg=name)


def test_refusals(demo_server, adapters, prompt_ids) -> None:
    lora = adapters["A"][1]
    cases = {
        "unknown id": (_lora_inputs(9_999), "LoRA task 9999 not found in cache. Please send LoRA weights with request"),
        "task id 0": (_lora_inputs(0, lora), "lora_task_id 0 is not a LoRA task"),
        "weights without id": (_lora_inputs(None, lora), "lora_task_id must be set for LoRA inference"),
    }
    results = _send_all(demo_server.grpc_url, prompt_ids, {name: inputs for name, (inputs, _) in cases.items()})
    for name, (_, message) in cases.items():
        assert not results[name].ok and message in results[name].error, f"{name}: {results[name].error}"
    # weights of another dtype: refused before the model (the declared type is the engine's, as NVIDIA's runtime
    # requires), by Triton itself
    half = type(lora)(lora.weights.astype(np.float16), lora.config, lora.rank, lora.target_modules)
    wrong = _send_all(demo_server.grpc_url, prompt_ids, {"fp16": _lora_inputs(2599, half, "FP16")})["fp16"]
    assert not wrong.ok and "FP16" in wrong.error and "lora_weights" in wrong.error, wrong.error


@pytest.fixture(scope="module")
def nvidia_clients() -> Path:
    """inflight_batcher_llm/client of a tensorrtllm_backend checkout (we ran c2e65b88d852), from
    $TENSORRTLLM_BACKEND_CHECKOUT; their code stays outside this project."""
    root = os.environ.get("TENSORRTLLM_BACKEND_CHECKOUT")
    if not root:
        pytest.skip("set TENSORRTLLM_BACKEND_CHECKOUT to a tensorrtllm_backend checkout to run NVIDIA's clients")
    return Path(root) / "inflight_batcher_llm" / "client"


def _client(script: Path, *args: str) -> str:
    run = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 0 and "Received an error from server" not in output and "Traceback" not in output, output
    return output


def test_nvidia_clients_with_lora(demo_server, demo_engine, adapters, nvidia_clients, tokenizer) -> None:
    """inflight_batcher_llm_client.py --lora-path DIR --lora-task-id N (weights, then the id alone), and
    end_to_end_grpc_client.py with the same options on the ensemble and the BLS: the text is PEFT's."""
    expected = tokenizer.decode(adapters["A"][3][0], skip_special_tokens=True).strip()
    base = tokenizer.decode(adapters["base"][3][0], skip_special_tokens=True).strip()
    assert expected != base
    folder = str(adapters["A"][2])
    direct = nvidia_clients / "inflight_batcher_llm_client.py"
    common = ["-u", demo_server.grpc_url, "--tokenizer-dir", str(demo_engine / "tokenizer"), "--text", PROMPT,
              "--request-output-len", str(NEW), "-S"]  # -S: streaming, as a decoupled repository needs
    for task, extra in ((2511, ["--lora-path", folder]), (2511, [])):
        assert expected in _client(direct, *common, "--lora-task-id", str(task), *extra)
    e2e = nvidia_clients / "end_to_end_grpc_client.py"
    for task, model in ((2512, "ensemble"), (2513, "tensorrt_llm_bls")):
        for extra in (["--lora-path", folder], []):
            output = _client(e2e, "-u", demo_server.grpc_url, "--model-name", model, "-o", str(NEW), "-p", PROMPT,
                             "--lora-task-id", str(task), *extra)
            assert expected in output, f"{model} {extra}: {output[-400:]}"

"""LoRA in the reference runtime: NVIDIA's checks and cache semantics (reference_runtime/lora.py), and a real
ReferenceEngine serving several PEFT adapters in one batch, token for token what PEFT itself generates."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lora_cases import ATTENTION, MLP, make_adapter, peft_greedy, tiny_llama
from pipeline.convert.lora import load_peft_adapter, to_trtllm_lora, write_trtllm_lora
from pipeline.reference_runtime.lora import (CACHE_FULL, NOT_CACHED, WRONG_DTYPE, LoraCache, LoraLayout, LoraRequest,
                                             read_prefetch_dir)
from pipeline.reference_runtime.requests import EngineLimits, GenerationRequest, RequestError

LIMITS = EngineLimits(max_batch_size=4, max_input_len=16, max_seq_len=64, max_num_tokens=256, tokens_per_block=16,
                      max_tokens_in_paged_kv_cache=1024, cancellation_check_period_ms=10)
PROMPT = [5, 17, 33, 2, 41, 8]
NEW = 12
# The served log-probs are those of the same float32 model through the paged-attention batch: they differ from
# PEFT's plain forward by rounding only.
LOGPROB_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "base")


@pytest.fixture(scope="module")
def adapters(base, tmp_path_factory):
    """Two PEFT adapters: rank 8 on attention and MLP, and rank 16 rsLoRA on q/v; converted to float32 (the
    engine's dtype: the checkpoint is float32)."""
    root = tmp_path_factory.mktemp("adapters")
    made = {"A": make_adapter(base, root / "A", rank=8, targets=ATTENTION + MLP, seed=3, scale=0.2),
            "B": make_adapter(base, root / "B", rank=16, targets=("q_proj", "v_proj", "down_proj"), rslora=True,
                              alpha=8, seed=4, scale=0.2)}
    converted = {}
    for name, folder in made.items():
        lora = to_trtllm_lora(load_peft_adapter(folder), "float32")
        converted[name] = (folder, lora, write_trtllm_lora(lora, root / f"{name}-trtllm"))
    return converted


def _layout(dtype="float32", max_rank=64, modules=frozenset({1, 2, 3, 4, 5, 6, 7})) -> LoraLayout:
    shapes = {(layer, m): (64, 64) for layer in range(2) for m in modules}
    return LoraLayout(dtype, 2, max_rank, shapes, modules)


def _tensors(rows=1, rank=4, dtype=np.float32, module=1, layer=0):
    weights = np.ones((1, rows, rank * 128), dtype=dtype)
    config = np.array([[[module, layer, rank]] * rows], dtype=np.int32)
    return weights, config


def test_first_request_carries_weights_later_ones_the_id() -> None:
    cache = LoraCache(1 << 20, _layout())
    weights, config = _tensors()
    with pytest.raises(RequestError) as unknown:
        cache.acquire(LoraRequest(7))
    assert str(unknown.value) == NOT_CACHED.format(task=7) == (
        "LoRA task 7 not found in cache. Please send LoRA weights with request")
    first = cache.acquire(LoraRequest(7, weights, config))
    again = cache.acquire(LoraRequest(7))
    assert again is first and set(first.pairs) == {(0, 1)}
    assert cache.acquire(None) is None and cache.acquire(LoraRequest(None)) is None


def test_host_cache_evicts_the_oldest_adapter_not_in_use() -> None:
    weights, config = _tensors()
    cache = LoraCache(2 * weights.nbytes, _layout())
    for task in (1, 2):
        cache.release(cache.acquire(LoraRequest(task, weights, config)))
    cache.release(cache.acquire(LoraRequest(1)))  # 1 is now the more recently used
    cache.release(cache.acquire(LoraRequest(3, weights, config)))
    assert cache.task_ids() == [1, 3]
    with pytest.raises(RequestError, match="LoRA task 2 not found in cache"):
        cache.acquire(LoraRequest(2))
    held = [cache.acquire(LoraRequest(1)), cache.acquire(LoraRequest(3))]  # both in use: nothing may go
    with pytest.raises(RequestError, match=CACHE_FULL.format(task=4).replace(".", r"\.")):
        cache.acquire(LoraRequest(4, weights, config))
    for adapter in held:
        cache.release(adapter)
    cache.release(cache.acquire(LoraRequest(4, weights, config)))
    assert cache.task_ids() == [3, 4]


@pytest.mark.parametrize("request_,message", [
    (LoraRequest(0), "lora_task_id 0 is not a LoRA task"),
    (LoraRequest(None, *_tensors()), "lora_task_id must be set for LoRA inference"),
    (LoraRequest(5, *_tensors(dtype=np.float16)), WRONG_DTYPE),
    (LoraRequest(5, *_tensors(module=0)), "lora module attn_qkv not enabled for this model"),
    (LoraRequest(5, *_tensors(layer=2)), r"Expected layerId to be in the range \[0, numModelLayers\)"),
    (LoraRequest(5, *_tensors(rank=128)), r"Invalid low_rank \(128\)"),
    (LoraRequest(5, _tensors()[0][:, :, :10], _tensors()[1]), "lora_weights has to few values for attn_q"),
    (LoraRequest(5, _tensors()[0], None), "lora_weights and lora_config go together"),
])
def test_refused_requests(request_, message) -> None:
    with pytest.raises(RequestError, match=message):
        LoraCache(1 << 20, _layout()).acquire(request_)


def test_prefetch_dir_holds_one_folder_per_task(adapters, tmp_path) -> None:
    import shutil

    shutil.copytree(adapters["A"][2], tmp_path / "prefetch" / "3")
    layout = LoraLayout("float32", 2, 64, {(layer, m): (64, 64) if m < 5 else (64, 128) if m != 6 else (128, 64)
                                          for layer in range(2) for m in range(1, 8)}, frozenset(range(1, 8)))
    assert [a.task_id for a in read_prefetch_dir(tmp_path / "prefetch", layout)] == [3]
    (tmp_path / "prefetch" / "adapter").mkdir()
    with pytest.raises(ValueError, match="not a task id"):
        read_prefetch_dir(tmp_path / "prefetch", layout)


def _serve(engine, jobs):
    """Submit every (request, lora) at once; the tokens and log-probs of each, by name."""
    done, results = threading.Event(), {}

    def collect(name):
        def on_event(event):
            if event.finished:
                results[name] = event
                if len(results) == len(jobs):
                    done.set()
        return on_event

    for name, lora in jobs.items():
        engine.submit(GenerationRequest(input_ids=PROMPT, max_new_tokens=NEW, return_log_probs=True, lora=lora),
                      collect(name))
    assert done.wait(120), f"only {sorted(results)} finished"
    return results


def test_engine_serves_peft_adapters_in_one_batch(base, adapters, tmp_path) -> None:
    import shutil

    from pipeline.reference_runtime.engine import ReferenceEngine
    from pipeline.reference_runtime.lora_apply import LoraSettings

    shutil.copytree(adapters["B"][2], tmp_path / "prefetch" / "22")
    expected = {name: peft_greedy(base, adapters[name][0] if name != "base" else None, PROMPT, NEW)
                for name in ("base", "A", "B")}
    assert expected["A"][0] != expected["base"][0] and expected["B"][0] != expected["base"][0], \
        "the adapters must change the output for this test to mean anything"
    engine = ReferenceEngine(base, LIMITS, lora=LoraSettings(prefetch_dir=tmp_path / "prefetch"))
    try:
        lora_a = adapters["A"][1]
        first = _serve(engine, {"base": None, "A": LoraRequest(11, lora_a.weights, lora_a.config),
                                "B": LoraRequest(22)})  # B from the prefetch folder: the id alone
        again = _serve(engine, {"A": LoraRequest(11), "base": None})  # A is cached now: the id alone
        with pytest.raises(RequestError, match="LoRA task 12 not found in cache"):
            engine.submit(GenerationRequest(input_ids=PROMPT, max_new_tokens=NEW, lora=LoraRequest(12)), print)
    finally:
        engine.close()
    for results in (first, again):
        for name, event in results.items():
            tokens, logprobs = expected[name]
            assert event.tokens == tokens, f"{name}: served {event.tokens}, PEFT {tokens}"
            np.testing.assert_allclose(event.logprobs, logprobs, atol=LOGPROB_TOLERANCE, err_msg=name)

"""Reference runtime pieces that need no model: word lists, per-request sampling, request limits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.reference_runtime.engine import ReferenceEngine
from pipeline.reference_runtime.requests import EngineLimits, GenerationRequest, RequestError
from pipeline.reference_runtime.sampling import RequestSampler, SamplingOptions
from pipeline.reference_runtime.words import ends_with_any, from_word_list, to_word_list


def test_word_list_round_trip_matches_the_trtllm_layout() -> None:
    array = to_word_list([[5, 6], [7]])
    assert array.tolist() == [[5, 6, 7], [2, 3, -1]]
    assert from_word_list(array[None]) == [[5, 6], [7]]
    assert from_word_list(to_word_list([])) == []
    assert from_word_list(None) == []
    with pytest.raises(ValueError, match="offsets"):
        from_word_list(np.array([[1, 2], [5, -1]], dtype=np.int32))
    assert ends_with_any([1, 5, 6], [[7], [5, 6]]) == [5, 6]
    assert ends_with_any([1, 5], [[5, 6]]) is None


def _pick(sampler: RequestSampler, slot: int, logits: list[float]) -> int:
    scores = torch.tensor([logits], dtype=torch.float32)
    out = sampler(scores, torch.tensor([slot], dtype=torch.int32))
    assert torch.isfinite(out).sum() == 1  # a one-hot row: the manager's draw can only return our choice
    return int(torch.argmax(out))


def test_greedy_bad_words_and_min_tokens() -> None:
    sampler = RequestSampler()
    logits = [0.0, 5.0, 4.0, 3.0]
    greedy = sampler.register(SamplingOptions(), prompt_ids=[9])
    assert _pick(sampler, greedy, logits) == 1
    banned = sampler.register(SamplingOptions(bad_words=((1,),)), prompt_ids=[9])
    assert _pick(sampler, banned, logits) == 2
    # a two-token bad word only bans its last token after its prefix
    prefixed = sampler.register(SamplingOptions(bad_words=((9, 1),)), prompt_ids=[9])
    assert _pick(sampler, prefixed, logits) == 2
    assert _pick(sampler, prefixed, logits) == 1  # history now ends with 2, not 9
    held = sampler.register(SamplingOptions(min_tokens=2, end_ids=(1,)), prompt_ids=[9])
    assert [_pick(sampler, held, logits) for _ in range(3)] == [2, 2, 1]
    state = sampler.state(greedy)
    assert state.logprobs[0] == pytest.approx(float(torch.log_softmax(torch.tensor(logits), -1)[1]))


def test_seeded_sampling_repeats_and_top_k_limits() -> None:
    sampler = RequestSampler()
    logits = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    runs = []
    for _ in range(2):
        slot = sampler.register(SamplingOptions(top_k=6, seed=1234, temperature=1.0), prompt_ids=[0])
        runs.append([_pick(sampler, slot, logits) for _ in range(12)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 1
    slot = sampler.register(SamplingOptions(top_k=2, seed=1), prompt_ids=[0])
    assert {_pick(sampler, slot, [0.0, 9.0, 8.0, 1.0]) for _ in range(30)} <= {1, 2}
    slot = sampler.register(SamplingOptions(top_p=0.5, top_k=0, seed=3), prompt_ids=[0])
    assert {_pick(sampler, slot, [0.0, 9.0, 1.0, 1.0]) for _ in range(20)} == {1}


def test_unknown_slot_falls_back_to_greedy_and_release_forgets() -> None:
    sampler = RequestSampler()
    slot = sampler.register(SamplingOptions(), prompt_ids=[])
    sampler.release(slot)
    assert sampler.state(slot) is None
    assert _pick(sampler, slot, [0.0, 1.0, 3.0]) == 2


def test_limits_reject_long_prompts_with_a_clear_message() -> None:
    engine = ReferenceEngine.__new__(ReferenceEngine)  # validation needs only the limits, not a model
    engine.limits = EngineLimits.from_build_config({"max_batch_size": 2, "max_input_len": 8, "max_seq_len": 12})
    engine.validate(GenerationRequest(input_ids=[1] * 8, max_new_tokens=4))
    with pytest.raises(RequestError, match="max_input_len 8"):
        engine.validate(GenerationRequest(input_ids=[1] * 9, max_new_tokens=1))
    with pytest.raises(RequestError, match="max_seq_len 12"):
        engine.validate(GenerationRequest(input_ids=[1] * 8, max_new_tokens=5))
    with pytest.raises(RequestError, match="empty"):
        engine.validate(GenerationRequest(input_ids=[], max_new_tokens=5))

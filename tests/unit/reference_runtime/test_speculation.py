"""Speculative decoding in the reference runtime (pipeline/reference_runtime/speculation.py): the output equals
the output without speculation token for token (transformers' greedy generate on the same model), for both methods,
streaming and not, and the draft counters are TensorRT-LLM's."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.reference_runtime.requests import EngineLimits, GenerationRequest, RequestError, check_request
from pipeline.reference_runtime.speculation import SpeculationError, SpeculativeConfig, ngram_draft
from speculative_cases import PROMPTS, chat_ids, speculative_folder

MAX_NEW = 32


def test_ngram_draft_follows_the_oldest_match_of_the_longest_suffix() -> None:
    tokens = [5, 6, 7, 1, 5, 6, 8, 2, 5, 6]
    assert ngram_draft(tokens, 2, 3) == [7, 1, 5]  # "5 6" first seen at 0: what followed it there
    assert ngram_draft([1, 2, 3], 3, 2) == []  # no earlier occurrence of any suffix
    assert ngram_draft(tokens, 2, 0) == []


def test_draft_tokens_on_an_engine_without_speculation_get_tensorrt_llms_error() -> None:
    request = GenerationRequest(input_ids=[1, 2, 3], max_new_tokens=4, draft_tokens=[4, 5])
    with pytest.raises(RequestError, match=r"Draft tokens length \(2\) exceeds maximum draft tokens length \(0\)"):
        check_request(request, EngineLimits(), None)
    check_request(request, EngineLimits(max_draft_len=2), None)
    assert EngineLimits.from_build_config({"speculative": {"max_draft_len": 5}}).max_draft_len == 5


def test_records_the_cpu_cannot_serve_are_refused(tmp_path: Path) -> None:
    for record, words in (({"method": "lookahead", "max_draft_len": 83}, "lookahead"),
                          ({"method": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 0}, "max_matching"),
                          ({"method": "ngram", "max_draft_len": 0, "max_matching_ngram_size": 2}, "max_draft_len"),
                          ({"method": "draft-target", "max_draft_len": 4}, "draft")):
        with pytest.raises(SpeculationError, match=words):
            SpeculativeConfig.from_engine_config({"build_config": {"speculative": record}}, tmp_path)
    assert SpeculativeConfig.from_engine_config({"build_config": {}}, tmp_path) is None


def _run(engine, request: GenerationRequest):
    done, events = threading.Event(), []

    def callback(event):
        events.append(event)
        if event.finished:
            done.set()

    engine.submit(request, callback)
    assert done.wait(300)
    return events


@pytest.mark.parametrize("record", [{"method": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 3},
                                    {"method": "draft-target", "max_draft_len": 4, "draft_dir": "draft"}],
                         ids=["ngram", "draft-target"])
def test_speculative_output_is_the_output_without_speculation(record, demo_hf_dir: Path, tmp_path: Path) -> None:
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.reference_runtime.speculation import SpeculativeEngine

    engine_dir = speculative_folder(demo_hf_dir, tmp_path / "engine", record)
    config = json.loads((engine_dir / "config.json").read_text())
    limits = EngineLimits.from_build_config(config["build_config"])
    engine = SpeculativeEngine(engine_dir / "model", limits, SpeculativeConfig.from_engine_config(config, engine_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(demo_hf_dir))
    plain = AutoModelForCausalLM.from_pretrained(str(demo_hf_dir), dtype=torch.float32)
    drafted = 0
    try:
        for kind, text in PROMPTS.items():
            ids = chat_ids(tokenizer, text)
            with torch.inference_mode():
                expected = plain.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)[0][len(ids):]
            expected = expected.tolist()
            expected = expected[:expected.index(2)] if 2 in expected else expected  # end id 2: not an output token
            for streaming in (False, True):
                events = _run(engine, GenerationRequest(input_ids=ids, max_new_tokens=MAX_NEW, streaming=streaming))
                final = events[-1]
                assert final.tokens == expected, (kind, streaming)
                if streaming:
                    assert sum((e.new_tokens for e in events), []) == expected
                assert 0 <= final.total_accepted_draft_tokens <= final.total_draft_tokens
                drafted += final.total_draft_tokens
            # a client's own draft: the right first three tokens and a wrong fourth, verified at the context step
            wrong = (expected[3] + 1) % 49152
            final = _run(engine, GenerationRequest(input_ids=ids, max_new_tokens=5,
                                                   draft_tokens=expected[:3] + [wrong]))[-1]
            assert final.tokens == expected[:5]
            assert final.total_accepted_draft_tokens >= 3 and final.acceptance_rate > 0
    finally:
        engine.close()
    assert drafted > 0

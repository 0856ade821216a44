"""pipeline.planner.offline: a trtllm-bench run replayed as the scheduler serves it, checked against a plain replay that
follows every request one iteration at a time."""

from __future__ import annotations

import random

import pytest

from pipeline.planner.offline import offline_schedule


def _request_by_request(isl: int, osl: int, requests: int, max_batch: int, max_num_tokens: int, chunked: bool) -> dict:
    """The same scheduler rules, one request and one iteration at a time: the totals any grouping must keep."""
    queued = list(range(requests))
    prompt_left: dict[int, int] = {}  # admitted, prompt not finished
    generated: dict[int, int] = {}  # decoding: tokens emitted so far
    totals = {"iterations": 0, "output": 0, "decode": 0, "prefill": 0, "decode_kv": 0}
    while queued or prompt_left or generated:
        decoding = [r for r, n in generated.items() if n < osl]
        budget = max_num_tokens - len(decoding)
        prefill, first_tokens = 0, []
        for r in list(prompt_left):  # a chunked prompt in progress goes first
            step = min(prompt_left[r], max(0, budget))
            prefill, budget, prompt_left[r] = prefill + step, budget - step, prompt_left[r] - step
            if prompt_left[r] == 0:
                del prompt_left[r]
                first_tokens.append(r)
        while queued and len(decoding) + len(prompt_left) + len(first_tokens) < max_batch:
            if budget >= isl or (not chunked and not decoding and not prompt_left and not first_tokens and not prefill):
                prefill, budget = prefill + isl, budget - isl
                first_tokens.append(queued.pop(0))
            elif chunked and budget > 0 and not prompt_left:
                r = queued.pop(0)
                prompt_left[r] = isl - budget
                prefill, budget = prefill + budget, 0
            else:
                break
        totals["iterations"] += 1
        totals["output"] += len(decoding) + len(first_tokens)
        totals["decode"] += len(decoding)
        totals["prefill"] += prefill
        totals["decode_kv"] += sum(isl + generated[r] for r in decoding)
        for r in decoding:
            generated[r] += 1
        for r in first_tokens:
            generated[r] = 1
        generated = {r: n for r, n in generated.items() if n < osl}
    return totals


def _totals(schedule) -> dict:
    g = schedule.groups
    return {"iterations": sum(x.iterations for x in g), "output": round(sum(x.iterations * x.logits_tokens for x in g)),
            "decode": round(sum(x.iterations * x.decode for x in g)), "prefill": round(sum(x.iterations * x.prefill_tokens for x in g)),
            "decode_kv": round(sum(x.iterations * x.decode * x.decode_context for x in g))}


@pytest.mark.parametrize("chunked", [False, True])
def test_grouped_schedule_keeps_every_iteration_and_token_of_the_plain_replay(chunked: bool) -> None:
    rng = random.Random(7)
    for _ in range(60):
        isl, osl = rng.choice([1, 7, 64, 300]), rng.choice([1, 2, 9, 50])
        requests, max_batch = rng.randint(1, 60), rng.randint(1, 24)
        max_num_tokens = rng.randint(isl if not chunked else 1, isl * 4 + max_batch)
        case = (isl, osl, requests, max_batch, max_num_tokens, chunked)
        schedule = offline_schedule(*case)
        plain = _request_by_request(*case)
        assert schedule.iterations == plain["iterations"], case
        assert schedule.output_tokens == plain["output"] == requests * osl, case
        assert _totals(schedule) == pytest.approx(plain, rel=1e-9), case


def test_waves_ramp_and_drain() -> None:
    """With room for every prompt at once, a wave is one prompt iteration and OSL - 1 decodes; a run twice the batch is two
    waves. With a token budget for two prompts an iteration, the batch fills over iterations."""
    assert offline_schedule(128, 100, 8, 8, 8 * 128, False).iterations == 100
    assert offline_schedule(128, 100, 16, 8, 8 * 128 + 8, False).iterations == 200
    ramp = offline_schedule(128, 100, 8, 8, 2 * 128 + 8, False)
    assert ramp.iterations == 103  # two prompts in each of the first four iterations: the last two start three late
    assert max(g.decode for g in ramp.groups) <= 8 and ramp.output_tokens == 800

"""A fake transport on virtual time, and tiny tokenizers: deterministic bench tests (no server)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

from pipeline.bench.transport import Chunk
from pipeline.bench.workload import BenchRequest


class VirtualTime:
    """A scripted clock: `sleep` parks the caller until the driver moves time to its wake-up."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list = []
        self._seq = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (self.now + max(0.0, seconds), next(self._seq), future))
        await future

    def run(self, coro):
        """Run coro to completion, advancing virtual time whenever every task is parked."""

        async def main():
            task = asyncio.ensure_future(coro)
            while not task.done():
                for _ in range(50):  # let every runnable task reach its next sleep
                    await asyncio.sleep(0)
                if task.done():
                    break
                if not self._heap:
                    await asyncio.sleep(0)
                    continue
                wake, _, future = heapq.heappop(self._heap)
                self.now = max(self.now, wake)
                future.set_result(None)
            return task.result()

        return asyncio.run(main())


@dataclass
class Script:
    """Per request: TTFT, gap between responses, tokens, and an optional error instead of tokens.
    per_chunk: tokens per response after the first (a speculative server streams each step's accepted tokens
    together); accepted/drafted: the speculation counts the last response carries (return_perf_metrics)."""

    ttft: float = 0.1
    gap: float = 0.02
    tokens: int = 5
    error: str | None = None
    per_chunk: int = 1
    accepted: int | None = None
    drafted: int | None = None

    def perf(self) -> dict[str, float] | None:
        if self.drafted is None:
            return None
        return {"acceptance_rate": (self.accepted or 0) / self.drafted if self.drafted else 0.0,
                "total_accepted_draft_tokens": float(self.accepted or 0), "total_draft_tokens": float(self.drafted)}


@dataclass
class FakeTransport:
    time: VirtualTime
    script: Callable[[BenchRequest], Script] = lambda request: Script()
    sent: list = field(default_factory=list)

    async def stream(self, request: BenchRequest) -> AsyncIterator[tuple[Chunk | None, str | None]]:
        self.sent.append((request.index, self.time.now))
        plan = self.script(request)
        await self.time.sleep(plan.ttft)
        if plan.error:
            yield None, plan.error
            return
        sizes = [1] + [plan.per_chunk] * ((plan.tokens - 1) // plan.per_chunk)
        if sum(sizes) < plan.tokens:
            sizes.append(plan.tokens - sum(sizes))
        for n, size in enumerate(sizes[:plan.tokens]):
            if n:
                await self.time.sleep(plan.gap)
            last = n == len(sizes) - 1
            yield Chunk(text=" w" * size, perf=plan.perf() if last else None), None

    def decode(self, payload: Chunk) -> Chunk:
        return payload


class WhitespaceTokenizer:
    """Counts words as tokens: enough for the metric arithmetic."""

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [t.split() for t in texts]}


def word_tokenizer():
    """A real Hugging Face fast tokenizer (WordLevel + Metaspace) of 300 four-letter words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["".join(p) for p in itertools.islice(itertools.product("abcdefghij", repeat=4), 300)]
    vocab = {"[UNK]": 0, **{"\u2581" + w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def requests(n: int, isl: int = 8, osl: int = 5) -> list[BenchRequest]:
    return [BenchRequest(index=i, prompt="p " * isl, isl=isl, max_tokens=osl, min_tokens=osl) for i in range(n)]

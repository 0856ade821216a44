"""Load generation: a fixed number of concurrent streams, or requests arriving at a rate
(constant or Poisson), bounded by a request count and/or a duration. The clock and the sleep are
injected so the timing logic runs deterministically in tests against a fake transport.

The hot path only stamps times and keeps the text; counting tokens happens after the run.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterator

from pipeline.bench.transport import Transport, Usage
from pipeline.bench.workload import BenchRequest

_timeout = getattr(asyncio, "timeout", None)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass
class RequestRecord:
    """Everything measured about one request (seconds on the runner's clock). Failures are records
    too: error holds the message and the request still counts."""

    index: int
    isl: int
    max_tokens: int
    min_tokens: int | None
    send_t: float
    first_t: float | None = None
    last_t: float | None = None
    end_t: float | None = None
    chunk_t: list[float] = field(default_factory=list)
    text_parts: list[str | bytes] = field(default_factory=list)
    payloads: list = field(default_factory=list)  # the transport's raw responses until decoded
    error: str | None = None
    perf: dict[str, float] | None = None  # server timestamps (ns) and speculation counts
    send_unix_ns: int = 0
    output_tokens: int | None = None  # the server's count (OpenAI usage), when it reports one
    adapter: str | None = None  # the request's --lora-mix class

    @property
    def text(self) -> str:
        """The streamed text. Parts may be raw bytes (decoded here, after the run, off the hot path);
        joining bytes before decoding keeps multi-byte characters split across responses intact."""
        parts = self.text_parts
        if parts and all(isinstance(p, bytes) for p in parts):
            return b"".join(parts).decode("utf-8", errors="replace")
        return "".join(p.decode("utf-8", errors="replace") if isinstance(p, bytes) else p for p in parts)

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_t is not None


@dataclass(frozen=True)
class Load:
    """One level of load: `concurrency` streams, or `rate` requests/s with the given arrival process."""

    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    requests: int | None = None
    duration_s: float | None = None

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.concurrency is not None else f"rate={self.rate:g}/s"


@dataclass
class LevelRun:
    load: Load
    records: list[RequestRecord]
    start_t: float
    end_t: float


class Runner:
    """Drives a Transport. `clock` returns seconds; `sleep` awaits seconds (asyncio.sleep by default)."""

    def __init__(self, transport: Transport, *, clock: Clock = time.perf_counter, sleep: Sleep | None = None,
                 request_timeout_s: float | None = None, on_done: Callable[[RequestRecord], None] | None = None,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.transport = transport
        self.clock = clock
        self.sleep = sleep or asyncio.sleep
        self.request_timeout_s = request_timeout_s
        self.on_done = on_done
        self.wall_ns = wall_ns
        self._compact = getattr(transport, "compact", None)

    async def one(self, request: BenchRequest) -> RequestRecord:
        clock = self.clock
        record = RequestRecord(index=request.index, isl=request.isl, max_tokens=request.max_tokens,
                               min_tokens=request.min_tokens, send_t=clock(), send_unix_ns=self.wall_ns(),
                               adapter=request.adapter)
        try:
            if self.request_timeout_s is None:
                await self._consume(request, record)
            elif _timeout is not None:  # Python >= 3.11: no extra task per request
                async with _timeout(self.request_timeout_s):
                    await self._consume(request, record)
            else:
                await asyncio.wait_for(self._consume(request, record), self.request_timeout_s)
        except asyncio.TimeoutError:
            record.error = f"timeout after {self.request_timeout_s:g} s"
        except Exception as error:  # a transport bug or failure is one failed request, not a dead run
            record.error = f"{type(error).__name__}: {error}"
        record.end_t = clock()
        if record.error is None and record.first_t is None:
            record.error = "no response"
        if self.on_done is not None:
            self.on_done(record)
        return record

    async def _consume(self, request: BenchRequest, record: RequestRecord) -> None:
        """The hot path: stamp the time and keep the payload; decoding waits until the level ends."""
        clock = self.clock
        times, payloads = record.chunk_t, record.payloads
        compact = self._compact
        async for payload, error in self.transport.stream(request):
            now = clock()
            if error is not None:
                record.error = str(error)
                return
            if type(payload) is Usage:  # counts, not a token: no time stamped
                payloads.append(payload)
                continue
            if record.first_t is None:
                record.first_t = now
            record.last_t = now
            times.append(now)
            payloads.append(payload if compact is None else compact(payload))

    def decode(self, records: list[RequestRecord]) -> None:
        """Payloads to text parts and server timestamps, after the timing is over."""
        for record in records:
            for payload in record.payloads:
                if type(payload) is Usage:
                    record.output_tokens = payload.completion_tokens
                    record.isl = payload.prompt_tokens or record.isl  # what the server prefilled (chat template included)
                    continue
                chunk = self.transport.decode(payload)
                if chunk.replace:
                    record.text_parts[:] = [chunk.text]
                else:
                    record.text_parts.append(chunk.text)
                if chunk.perf:
                    record.perf = chunk.perf if record.perf is None else {**record.perf, **chunk.perf}
            record.payloads = []

    async def warmup(self, requests: list[BenchRequest], concurrency: int) -> None:
        """Requests that are sent and awaited but not recorded."""
        if requests:
            await self.concurrency_level(iter(requests), concurrency, None, record=False)

    async def run(self, load: Load, requests: Iterator[BenchRequest]) -> LevelRun:
        start = self.clock()
        if load.concurrency is not None:
            records = await self.concurrency_level(requests, load.concurrency, load.duration_s)
        else:
            records = await self.rate_level(requests, load)
        end = self.clock()
        self.decode(records)
        return LevelRun(load=load, records=sorted(records, key=lambda r: r.index), start_t=start, end_t=end)

    async def concurrency_level(self, requests: Iterator[BenchRequest], concurrency: int, duration_s: float | None,
                                *, record: bool = True) -> list[RequestRecord]:
        """`concurrency` workers, each sending its next request as soon as the previous one ends.
        With a duration, no request starts after it has passed (started ones finish and count)."""
        records: list[RequestRecord] = []
        deadline = None if duration_s is None else self.clock() + duration_s

        async def worker() -> None:
            for request in requests:  # one shared iterator: the workers take turns
                if deadline is not None and self.clock() >= deadline:
                    return
                done = await self.one(request)
                if record:
                    records.append(done)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return records

    async def rate_level(self, requests: Iterator[BenchRequest], load: Load) -> list[RequestRecord]:
        """Requests start at scheduled times (constant gaps of 1/rate, or exponential gaps for a
        Poisson process, seeded) whatever the server's state; none starts after the duration."""
        rng = random.Random(0)
        start = self.clock()
        tasks: list[asyncio.Task] = []
        offset = 0.0
        for request in requests:
            if load.duration_s is not None and offset >= load.duration_s:
                break
            wait = start + offset - self.clock()
            if wait > 0:
                await self.sleep(wait)
            tasks.append(asyncio.ensure_future(self.one(request)))
            gap = 1.0 / load.rate if load.arrival == "constant" else rng.expovariate(load.rate)
            offset += gap
        return list(await asyncio.gather(*tasks))

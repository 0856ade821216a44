"""Put a served repository under load (concurrent streams) and scrape its /metrics meanwhile, keeping what is
needed to say, for each scrape, how many requests were surely running and whether that is all of them."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

from promql_eval import Series

# How late a server-side count may be seen by a scrape: the reference runtime refreshes its metrics every
# stats_check_period_ms (100 ms), and a response takes a moment from the model to the client.
LAG_S = 0.3
# A request sent this long ago has reached the model's `execute` (which returns at once) even when no
# response has come back yet (queued behind a full batch).
ACCEPTED_AFTER_S = 1.0


@dataclass
class Stream:
    sent: float = 0.0
    responses: list[tuple[float, bool]] = field(default_factory=list)  # (time received, final)
    error: str | None = None

    @property
    def accepted(self) -> float:
        """When the model surely had it: its first response, or ACCEPTED_AFTER_S after sending."""
        return min([self.sent + ACCEPTED_AFTER_S] + [t for t, _ in self.responses[:1]])

    @property
    def ended(self) -> float | None:
        return next((t for t, final in self.responses if final), None)

    def running_through(self, start: float, end: float) -> bool:
        """Surely counted for all of [start, end]: accepted before it, and a later non-final response
        (sent after `end`, so the final one was too) came LAG_S after it."""
        return self.accepted < start - LAG_S and any(not final and t > end + LAG_S for t, final in self.responses)

    def over_before(self, start: float) -> bool:
        ended = self.ended
        return ended is not None and ended < start - LAG_S


@dataclass
class Scrape:
    start: float
    end: float
    running: int  # requests surely in flight for the whole scrape
    ambiguous: int  # requests that may or may not have been counted


def load_and_scrape(url: str, model: str, requests: list[list], metrics_url: str, series: Series,
                    timeout_s: float = 300.0) -> tuple[list[Stream], list[Scrape]]:
    """Send each request (a list of tritonclient InferInputs) on a stream of its own, scrape metrics_url
    into `series` every 0.25 s until every stream has ended, and classify each scrape."""
    import tritonclient.grpc as grpcclient

    from pipeline.clients.triton import is_final

    streams, clients = [Stream() for _ in requests], []
    lock = threading.Lock()

    def callback(stream: Stream):
        def receive(result=None, error=None):
            with lock:
                if error is not None:
                    stream.error = str(error)
                    stream.responses.append((time.monotonic(), True))
                else:
                    stream.responses.append((time.monotonic(), is_final(result)))
        return receive

    started = time.monotonic()
    try:
        for stream, inputs in zip(streams, requests):
            client = grpcclient.InferenceServerClient(url)
            clients.append(client)
            client.start_stream(callback=callback(stream))
            stream.sent = time.monotonic()
            client.async_stream_infer(model, inputs, request_id=uuid.uuid4().hex, enable_empty_final_response=True)
        windows = []
        while time.monotonic() - started < timeout_s:
            with lock:
                if all(s.ended is not None for s in streams):
                    break
            start = time.monotonic()
            text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
            end = time.monotonic()
            series.add((start + end) / 2, text)
            windows.append((start, end))
            time.sleep(0.25)
        time.sleep(LAG_S)  # the last scrapes' "later response" may still be on its way
        end = time.monotonic()
        series.add(end, urllib.request.urlopen(metrics_url, timeout=10).read().decode())
        windows.append((end, end))
    finally:
        for client in clients:
            client.stop_stream()
            client.close()
    scrapes = []
    for start, end in windows:
        running = sum(s.running_through(start, end) for s in streams)
        over = sum(s.over_before(start) for s in streams)
        scrapes.append(Scrape(start, end, running, len(streams) - running - over))
    return streams, scrapes

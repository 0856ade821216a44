"""Soak a served model: N concurrent streams for a duration with pipeline.bench's runner, counting
every request (none may be lost or fail) and sampling the RSS of the whole tritonserver process tree
(server + Python-backend stubs) before, during and after.

    python scripts/soak.py --url 127.0.0.1:8001 --server-pid PID --duration 600 --concurrency 32
    python scripts/soak.py --demo --duration 600            # start the demo deployment itself

Exit 0 when every request succeeded and the server's RSS does not keep growing: a leak is judged by
the slope of RSS over the run once warmed up (a least-squares fit of the samples after the first third),
not by end minus start, which a one-off allocation (an arena, a cache filled once) moves as much as a
leak does; exit 4 otherwise (a gate, like the other CI gates). The JSON summary goes to stdout (and --out).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

# Short requests, so 2 loaded CPU cores keep up with 32 streams (8 batch slots) without timeouts:
# measured p99 ~55 s at concurrency 32 with the machine shared (load ~8).
DEFAULT_ISL, DEFAULT_OSL = 16, 8
RSS_WARMUP_FRACTION = 1 / 3  # samples in this first share of the run are warm-up (allocator arenas, caches)
# Allowed slope of the server tree's RSS after warm-up, MiB per minute, or this share of the starting RSS per
# minute, whichever is larger. A leak grows with the requests served, so it shows as a steady slope; 8 MiB/min
# is ~11 GiB a day, or a leak of ~50 KiB per request at the 2.8 requests/s a 60 s soak reached on 2 busy
# cores (measured: slope 0.11 MiB/min there, the allowed one 10.7 MiB/min from the 0.5 % rule).
RSS_SLOPE_MIB_PER_MIN = 8.0
RSS_SLOPE_FRACTION_PER_MIN = 0.005


def rss_slope_mib_per_min(samples: list[tuple[float, int]], warmup_fraction: float = RSS_WARMUP_FRACTION) -> float | None:
    """Least-squares slope (MiB per minute) of (seconds, RSS bytes) samples taken after the warm-up share of
    the run; None with fewer than 3 such samples."""
    if not samples:
        return None
    start = samples[-1][0] * warmup_fraction
    kept = [(t, b / 2**20) for t, b in samples if t >= start]
    if len(kept) < 3:
        return None
    mean_t = sum(t for t, _ in kept) / len(kept)
    mean_m = sum(m for _, m in kept) / len(kept)
    spread = sum((t - mean_t) ** 2 for t, _ in kept)
    if spread == 0:
        return None
    return 60.0 * sum((t - mean_t) * (m - mean_m) for t, m in kept) / spread


def tree_rss_bytes(pid: int) -> int:
    """RSS of a process and all its descendants (tritonserver + triton_python_backend_stub)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def _soak(url: str, model: str, duration_s: float, concurrency: int, isl: int, osl: int, server_pid: int | None,
                sample_every_s: float, request_timeout_s: float) -> dict[str, Any]:
    from pipeline.bench.runner import Runner
    from pipeline.bench.spec import Dist
    from pipeline.bench.transport import TritonTransport, model_info
    from pipeline.bench.workload import load_tokenizer, synthetic_requests

    info = model_info(url, model)
    if info.tokenizer_dir is None:
        raise SystemExit(f"{model} at {url} does not name its tokenizer folder")
    tokenizer = load_tokenizer(info.tokenizer_dir)
    pool = synthetic_requests(tokenizer, Dist(mean=isl), Dist(mean=osl), 64, seed=0)
    counter = itertools.count()

    def endless():
        for index in counter:
            yield dataclasses.replace(pool[index % len(pool)], index=index)

    transport = _Counting(TritonTransport(url, info, timeout_s=request_timeout_s))
    runner = Runner(transport, request_timeout_s=request_timeout_s)
    samples: list[tuple[float, int]] = []
    try:
        await runner.warmup([dataclasses.replace(pool[i], index=-1 - i) for i in range(concurrency)], concurrency)
        rss_start = tree_rss_bytes(server_pid) if server_pid else None
        started = time.monotonic()

        async def sampler() -> None:
            while server_pid:
                samples.append((round(time.monotonic() - started, 1), tree_rss_bytes(server_pid)))
                await asyncio.sleep(sample_every_s)

        task = asyncio.ensure_future(sampler())
        records = await runner.concurrency_level(endless(), concurrency, duration_s)
        elapsed = time.monotonic() - started
        task.cancel()
        sent = transport.started - concurrency  # every request that reached the wire must have a record
        await asyncio.sleep(2.0)  # let the server release what the last requests held
        rss_end = tree_rss_bytes(server_pid) if server_pid else None
        if rss_end:
            samples.append((round(time.monotonic() - started, 1), rss_end))
    finally:
        await transport.inner.close()
    errors = [r.error for r in records if not r.ok]
    latencies = [r.end_t - r.send_t for r in records if r.ok and r.end_t is not None]
    ttfts = [r.first_t - r.send_t for r in records if r.ok and r.first_t is not None]
    summary: dict[str, Any] = {
        "url": url, "model": model, "concurrency": concurrency, "duration_s": round(elapsed, 1), "isl": isl, "osl": osl,
        "requests_sent": sent, "requests_recorded": len(records), "ok": len(records) - len(errors),
        "errors": len(errors), "error_examples": sorted(set(e or "" for e in errors))[:5],
        "requests_per_s": round(len(records) / elapsed, 2) if elapsed else None,
        "latency_p50_s": _round(_percentile(latencies, 0.50)), "latency_p99_s": _round(_percentile(latencies, 0.99)),
        "ttft_p99_s": _round(_percentile(ttfts, 0.99)),
        "server_rss_start_mib": _mib(rss_start), "server_rss_end_mib": _mib(rss_end),
        "server_rss_max_mib": _mib(max((s[1] for s in samples), default=None)),
        "rss_samples_mib": [(t, _mib(b)) for t, b in samples],
    }
    summary["lost"] = summary["requests_sent"] - summary["requests_recorded"]
    slope = rss_slope_mib_per_min(samples)
    if rss_start and rss_end:
        summary["rss_growth_mib"] = round((rss_end - rss_start) / 2**20, 1)  # reported, not judged
    if rss_start and slope is not None:
        allowed = max(RSS_SLOPE_MIB_PER_MIN, RSS_SLOPE_FRACTION_PER_MIN * rss_start / 2**20)
        summary["rss_slope_mib_per_min"] = round(slope, 2)
        summary["rss_allowed_slope_mib_per_min"] = round(allowed, 2)
        summary["rss_stable"] = slope <= allowed
    elif server_pid:
        summary["rss_stable"] = False  # too few samples to judge: a gate that cannot judge does not pass
        summary["rss_note"] = "fewer than 3 RSS samples after warm-up: lengthen --duration or shorten --sample-every"
    summary["passed"] = summary["errors"] == 0 and summary["lost"] == 0 and summary.get("rss_stable", True)
    return summary


class _Counting:
    """The transport, counting the requests put on the wire (warm-up included)."""

    def __init__(self, inner) -> None:
        self.inner, self.started = inner, 0

    def stream(self, request):
        self.started += 1
        return self.inner.stream(request)

    def decode(self, payload):
        return self.inner.decode(payload)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _mib(value: int | None) -> float | None:
    return None if not value else round(value / 2**20, 1)


def soak(url: str, *, model: str = "ensemble", duration_s: float = 600.0, concurrency: int = 32, isl: int = DEFAULT_ISL,
         osl: int = DEFAULT_OSL, server_pid: int | None = None, sample_every_s: float = 5.0,
         request_timeout_s: float = 120.0) -> dict[str, Any]:
    """Run the soak against a running server; returns the summary (see `passed`)."""
    return asyncio.run(_soak(url, model, duration_s, concurrency, isl, osl, server_pid, sample_every_s, request_timeout_s))


def _demo_server(build: Path):
    """The demo deployment as the integration tests make it (download demo -> reference engine -> render -> serve)."""
    import os
    import sysconfig

    from pipeline.download import DownloadSpec, download
    from pipeline.build.reference_folder import write_reference_engine_dir
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    libdir = sysconfig.get_config_var("LIBDIR") or ""
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    hf = download(DownloadSpec(source="demo", root=build)).path
    engine = write_reference_engine_dir(hf, build / "smollm2-demo" / "engines" / "ref-soak",
                                        {"max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512, "max_num_tokens": 2048})
    repo = render(RenderSpec(engine=engine, runtime="reference")).repo
    return start_server(ServerSpec(repo=repo, log_file=build / "logs" / "soak-tritonserver.log", ready_timeout_s=900))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Triton gRPC HOST:PORT (or --demo)")
    parser.add_argument("--server-pid", type=int, help="tritonserver pid, for the RSS of its process tree")
    parser.add_argument("--demo", action="store_true", help="start the demo deployment under --build-dir and soak it")
    parser.add_argument("--build-dir", type=Path, default=Path("build"))
    parser.add_argument("--model", default="ensemble")
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--isl", type=int, default=DEFAULT_ISL)
    parser.add_argument("--osl", type=int, default=DEFAULT_OSL)
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    args = parser.parse_args(argv)
    if not args.demo and not args.url:
        parser.error("give --url (and --server-pid) or --demo")
    if args.demo:
        with _demo_server(args.build_dir.resolve()) as server:
            summary = soak(server.grpc_url, model=args.model, duration_s=args.duration, concurrency=args.concurrency,
                           isl=args.isl, osl=args.osl, server_pid=server.pid)
    else:
        summary = soak(args.url, model=args.model, duration_s=args.duration, concurrency=args.concurrency,
                       isl=args.isl, osl=args.osl, server_pid=args.server_pid)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if summary["passed"] else 4


if __name__ == "__main__":
    sys.exit(main())

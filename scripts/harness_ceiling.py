#!/usr/bin/env python3
"""Is the bench harness the bottleneck? Compare its streamed responses/s with a minimal raw
tritonclient.grpc.aio streaming loop, in the same run, against the zero-work echo model.

Both sides send the same prompts at the same concurrency, one gRPC stream per request, and are
timed the same way (wall clock from the first send to the last response). Rounds alternate
raw/harness so drift on a shared machine hits both; the ratio is the median of the rounds' ratios. Also reports client CPU per 1000 responses
and, with return_perf_metrics, the median difference between the client's first-response time and
the server's first-token timestamp.

    .venv/bin/python scripts/harness_ceiling.py [--concurrency 64] [--requests 1000] [--osl 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # bench_fakes: test support, not in the wheel

from bench_fakes import word_tokenizer  # noqa: E402
from pipeline.bench.metrics import request_metrics  # noqa: E402
from pipeline.bench.runner import Load, Runner  # noqa: E402
from pipeline.bench.spec import Dist  # noqa: E402
from pipeline.bench.transport import TritonTransport, model_info  # noqa: E402
from pipeline.bench.workload import cycle, synthetic_requests  # noqa: E402
from pipeline.serve import ServerSpec, start_server  # noqa: E402

ECHO_REPO = REPO / "tests" / "fixtures" / "echo_repo"


async def raw_loop(url: str, prompts: list[tuple[str, int]], concurrency: int) -> int:
    """The least a client can do: build the inputs, open a stream, count responses."""
    import tritonclient.grpc.aio as aio
    from tritonclient.grpc import InferInput

    client = aio.InferenceServerClient(url)
    queue = list(reversed(prompts))
    count = 0

    async def worker() -> None:
        nonlocal count
        while queue:
            prompt, osl = queue.pop()
            inputs = []
            for name, value, dtype in (("text_input", np.array([[prompt.encode()]], dtype=np.object_), "BYTES"),
                                       ("max_tokens", np.array([[osl]], dtype=np.int32), "INT32"),
                                       ("min_tokens", np.array([[osl]], dtype=np.int32), "INT32"),
                                       ("stream", np.array([[True]]), "BOOL")):
                tensor = InferInput(name, list(value.shape), dtype)
                tensor.set_data_from_numpy(value)
                inputs.append(tensor)

            async def one():
                yield {"model_name": "echo", "inputs": inputs}

            async for result, error in client.stream_infer(one()):
                if error is None:
                    result.as_numpy("text_output")
                    count += 1

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    return count


async def harness(url: str, info, requests, concurrency: int, perf: bool = False):
    transport = TritonTransport(url, info, perf_metrics=perf)
    try:
        run = await Runner(transport).run(Load(concurrency=concurrency, requests=len(requests)), iter(requests))
    finally:
        await transport.close()
    return run


def timed(coro_factory):
    cpu0, t0 = time.process_time(), time.perf_counter()
    value = asyncio.run(coro_factory())
    return value, time.perf_counter() - t0, time.process_time() - cpu0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--osl", type=int, default=16)
    parser.add_argument("--isl", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    tokenizer = word_tokenizer()
    pool = synthetic_requests(tokenizer, Dist(mean=args.isl), Dist(mean=args.osl), 256)
    requests = list(cycle(pool, args.requests))
    prompts = [(r.prompt, r.max_tokens) for r in requests]
    rows = []
    with start_server(ServerSpec(repo=ECHO_REPO, log_file=REPO / "build" / "logs" / "harness_ceiling.log")) as server:
        url = server.grpc_url
        info = model_info(url, "echo")
        asyncio.run(raw_loop(url, prompts[: args.concurrency * 2], args.concurrency))  # warm both paths
        for round_ in range(args.rounds):
            count, wall, cpu = timed(lambda: raw_loop(url, prompts, args.concurrency))
            rows.append({"round": round_, "side": "raw", "responses": count, "wall_s": wall, "cpu_s": cpu})
            run, wall, cpu = timed(lambda: harness(url, info, requests, args.concurrency))
            count = sum(len(r.chunk_t) for r in run.records)
            errors = sum(r.error is not None for r in run.records)
            rows.append({"round": round_, "side": "harness", "responses": count, "wall_s": wall, "cpu_s": cpu, "errors": errors})
        # at concurrency 1, so that queueing inside the model does not hide in the difference
        perf_run = asyncio.run(harness(url, info, requests[:200], 1, perf=True))
    for row in rows:
        row["responses_s"] = row["responses"] / row["wall_s"]
        row["cpu_ms_per_1k_responses"] = 1e6 * row["cpu_s"] / row["responses"]
    raw_rate = sum(r["responses"] for r in rows if r["side"] == "raw") / sum(r["wall_s"] for r in rows if r["side"] == "raw")
    h_rate = sum(r["responses"] for r in rows if r["side"] == "harness") / sum(r["wall_s"] for r in rows if r["side"] == "harness")
    per_round = [h["responses_s"] / r["responses_s"] for r, h in zip(rows[0::2], rows[1::2])]
    cpu_raw = sum(r["cpu_s"] for r in rows if r["side"] == "raw") / sum(r["responses"] for r in rows if r["side"] == "raw")
    cpu_h = sum(r["cpu_s"] for r in rows if r["side"] == "harness") / sum(r["responses"] for r in rows if r["side"] == "harness")
    diffs = [m.client_minus_server_first_token_ms for m in (request_metrics(r, None) for r in perf_run.records)
             if m.client_minus_server_first_token_ms is not None]
    server_ttft = [m.server_ttft_ms for m in (request_metrics(r, None) for r in perf_run.records) if m.server_ttft_ms is not None]
    summary = {
        "concurrency": args.concurrency, "requests_per_side_per_round": args.requests, "osl": args.osl,
        "raw_responses_s": raw_rate, "harness_responses_s": h_rate, "ratio_total": h_rate / raw_rate,
        "ratio": statistics.median(per_round), "ratio_per_round": per_round, "goal": 0.95,
        # client CPU per response, raw / harness: robust to a busy machine (>= 1 means the harness is no costlier)
        "cpu_ratio": cpu_raw / cpu_h,
        "median_client_minus_server_first_token_ms": statistics.median(diffs) if diffs else None,
        "median_server_ttft_ms": statistics.median(server_ttft) if server_ttft else None,
        "rounds": rows,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for row in rows:
            print(f"round {row['round']} {row['side']:8s} {row['responses']:6d} responses in {row['wall_s']:.2f} s = "
                  f"{row['responses_s']:8.0f}/s, client CPU {row['cpu_ms_per_1k_responses']:.1f} ms per 1k responses")
        print(f"harness / raw = {summary['ratio']:.3f} median of rounds ({', '.join(f'{r:.3f}' for r in per_round)}), "
              f"{summary['ratio_total']:.3f} over all rounds; goal >= 0.95")
        print(f"client CPU per response, raw / harness = {summary['cpu_ratio']:.3f} (1.0: the harness costs what the raw loop costs)")
        if diffs:
            print(f"concurrency 1: client first response - server first token: median {summary['median_client_minus_server_first_token_ms']:.2f} ms "
                  f"(server-side TTFT median {summary['median_server_ttft_ms']:.2f} ms)")
    return 0 if summary["ratio"] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())

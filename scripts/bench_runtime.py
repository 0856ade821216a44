#!/usr/bin/env python3
"""Does the reference runtime's continuous batching pay? (`make bench-runtime`; not a timed test)

Builds the demo deployment under --build-dir (download demo -> reference engine with max_batch_size 8 ->
render -> serve), then alternates, for --rounds rounds, `pipeline bench` at concurrency 1 and 8 against the
ensemble with transformers' static `generate` at batch 1 and 8 in this process, with the runtime's torch
threads (ISL 64 / OSL 32, greedy, output length forced). Every ratio is taken within one round; the
reported figure is the median over rounds. Targets (exit 4 when one is missed): served c=8 >= 3.5x
served c=1, and >= 0.85x static batch-8 generate (pipeline/bench/runtime.py).

Then what the demo's latency engine (max_batch_size 4) gives up: the same engine built with max_batch_size
4 is served beside the first, and concurrency 8 alternates between the two (--batch-rounds times).

    .venv/bin/python scripts/bench_runtime.py [--build-dir build] [--rounds 5] [--out build/reports/bench-runtime.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.bench.runtime import RuntimeBenchSpec, compare_batch_limits, run_runtime_bench  # noqa: E402

BUILD_CONFIG = {"max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512, "max_num_tokens": 2048}
LATENCY_BATCH = 4  # the demo's engine (pipeline build --gpu cpu --goal latency: pipeline.build.memory.CPU_DEFAULTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", type=Path, default=REPO / "build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-rounds", type=int, default=2, help="alternations of the max_batch_size 4 vs 8 runs (0: skip)")
    parser.add_argument("--isl", type=int, default=64)
    parser.add_argument("--osl", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None, help="JSON summary (default: BUILD/reports/bench-runtime.json)")
    args = parser.parse_args(argv)

    from pipeline.core.cpus import reference_threads
    from pipeline.download import DownloadSpec, download
    from pipeline.build.reference_folder import write_reference_engine_dir
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    build = args.build_dir.resolve()
    hf = download(DownloadSpec(source="demo", root=build)).path

    def deployment(name: str, max_batch_size: int):
        engine = write_reference_engine_dir(hf, build / "smollm2-demo" / "engines" / name,
                                            {**BUILD_CONFIG, "max_batch_size": max_batch_size})
        repo = render(RenderSpec(engine=engine, runtime="reference", out=build / "smollm2-demo" / "triton" / name)).repo
        spec = ServerSpec(repo=repo, log_file=build / "logs" / f"{name}-tritonserver.log", ready_timeout_s=600,
                          warmup=True, exit_timeout_s=5)
        return engine, start_server(spec)

    engine, server = deployment("ref-bench-runtime", BUILD_CONFIG["max_batch_size"])
    with server:
        spec = RuntimeBenchSpec(url=server.grpc_url, model_dir=engine / "model", tokenizer_dir=engine / "tokenizer",
                                threads=reference_threads(), isl=args.isl, osl=args.osl,
                                batch=BUILD_CONFIG["max_batch_size"], rounds=args.rounds)
        result = run_runtime_bench(spec, log=lambda line: print(line, flush=True))
        batches = None
        if args.batch_rounds:
            _, small = deployment("ref-bench-runtime-b4", LATENCY_BATCH)
            with small:
                batches = compare_batch_limits(spec, small.grpc_url, LATENCY_BATCH, rounds=args.batch_rounds,
                                               log=lambda line: print(line, flush=True))
    summary = result.as_dict()
    if batches is not None:
        summary["max_batch_size_4_vs_8"] = batches.as_dict()
    out = args.out or build / "reports" / "bench-runtime.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"torch threads {spec.threads}; median over {len(result.rounds)} rounds (each ratio within one round):")
    for name, measured, target, met in result.targets():
        print(f"  {name}: {measured:.2f} (target {'<=' if name == 'errors' else '>='} {target:g}) "
              f"{'ok' if met else 'MISSED'}")
    print(f"  static generate batch 8 / batch 1 (what the hardware gives): {result.static_scaling:.2f}")
    if batches is not None:
        b4, b8 = LATENCY_BATCH, BUILD_CONFIG["max_batch_size"]
        print(f"  concurrency {b8} on max_batch_size {b4} vs {b8}: "
              f"{batches.median(b4, 'output_tok_s') / batches.median(b8, 'output_tok_s'):.2f}x the output tokens/s, "
              f"TTFT p50 {batches.median(b4, 'ttft_p50_ms') / 1000:.2f} s vs {batches.median(b8, 'ttft_p50_ms') / 1000:.2f} s")
    print(f"written {out}")
    return 0 if result.passed else 4


if __name__ == "__main__":
    sys.exit(main())

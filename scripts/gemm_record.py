#!/usr/bin/env python
"""Write pipeline/data/trtllm_gemm_rate.tsv: the rate TensorRT-LLM's GEMMs reach on silicon, per GPU and GEMM dtype,
from the perf database that AIConfigurator ships (systems/data/<system>/gemm/trtllm/<version>/gemm_perf.parquet).

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/gemm_record.py [OUT.tsv]

Per GPU, dtype and M (tokens): the median TFLOP/s (2*M*N*K over the measured latency) over the measured shapes with
4096 <= N, K <= 32768, the range of dense LLM layers' GEMMs per GPU; the oldest TensorRT-LLM version the database holds.
And how well two rooflines describe those latencies: each shape's measured latency over the larger of, and over the
2-norm of, its weight-read time (N*K bytes at the median read rate of M 8) and math time (at the median TFLOP/s of the
largest M), the median over shapes (1.0: the roofline is the latency).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import origin, perf_files, write_table  # noqa: E402

DTYPES = ("bfloat16", "fp8", "nvfp4", "sq")
TOKENS = (8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
SHAPES = (4096, 32768)  # N and K range
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "sq": 1.0, "nvfp4": 0.5 + 1 / 16}  # FP4: one FP8 scale per 16 weights
COLUMNS = ("gpu", "dtype", "tokens", "median_tflops", "latency_over_max", "latency_over_2norm", "shapes", "system",
           "trtllm_version", "aiconfigurator_version", "source")


def rows() -> list[dict[str, str]]:
    import pandas as pd

    version, files = perf_files("gemm", "gemm_perf.parquet")
    out = []
    for gpu, system, path, release in files:
        frame = pd.read_parquet(path)
        low, high = SHAPES
        frame = frame[frame["n"].between(low, high) & frame["k"].between(low, high)]
        frame = frame.assign(tflops=2 * frame["m"] * frame["n"] * frame["k"] / (frame["latency"] * 1e-3) / 1e12)
        for dtype in DTYPES:
            measured = frame[frame["gemm_dtype"] == dtype]
            if measured.empty:
                continue
            measured = measured.assign(read_bytes=measured["n"] * measured["k"] * WEIGHT_BYTES[dtype],
                                       seconds=measured["latency"] * 1e-3)
            smallest, largest = measured[measured["m"] == TOKENS[0]], measured[measured["m"] == TOKENS[-1]]
            read_rate = (smallest["read_bytes"] / smallest["seconds"]).median()
            math_rate = largest["tflops"].median() * 1e12
            read_s = measured["read_bytes"] / read_rate
            math_s = 2 * measured["m"] * measured["n"] * measured["k"] / math_rate
            measured = measured.assign(over_max=measured["seconds"] / read_s.combine(math_s, max),
                                       over_2norm=measured["seconds"] / (read_s**2 + math_s**2) ** 0.5)
            for tokens in TOKENS:
                picked = measured[measured["m"] == tokens]
                if picked.empty:
                    continue
                out.append({"gpu": gpu, "dtype": dtype, "tokens": str(tokens), "median_tflops": f"{picked['tflops'].median():.1f}",
                            "latency_over_max": f"{picked['over_max'].median():.3f}",
                            "latency_over_2norm": f"{picked['over_2norm'].median():.3f}",
                            "shapes": str(len(picked)), **origin(system, release, version, path)})
    return out


def main() -> None:
    write_table("trtllm_gemm_rate.tsv",
                "TensorRT-LLM GEMM rate (median TFLOP/s over dense-layer shapes, 4096 <= N, K <= 32768) measured on silicon,\n"
                "per GPU, GEMM dtype and M, from the perf database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is\n"
                "the file inside its package); and the median of each shape's latency over the larger of, and over the\n"
                "2-norm of, its weight-read and math times (tests/unit/planner/test_timing.py: the knee of the roofline).\n"
                "Written by scripts/gemm_record.py; read by pipeline/planner/rates.py _silicon_gemm_rates() (the largest M's\n"
                "rows: measured_gemm_rate() and fp4_share_of_fp8()).",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Write pipeline/data/trtllm_gemm_rate.tsv: the rate TensorRT-LLM's GEMMs reach on silicon, per GPU and GEMM dtype,
from the perf database that AIConfigurator ships (systems/data/<system>/gemm/trtllm/<version>/gemm_perf.parquet).

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/gemm_record.py [OUT.tsv]

Per GPU, dtype and M (tokens): the median TFLOP/s (2*M*N*K over the measured latency) over the measured shapes with
4096 <= N, K <= 32768, the range of dense LLM layers' GEMMs per GPU; the oldest TensorRT-LLM version the database holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import package_path, perf_files, write_table  # noqa: E402

DTYPES = ("bfloat16", "fp8", "nvfp4", "sq")
TOKENS = (1024, 4096, 8192)
SHAPES = (4096, 32768)  # N and K range
COLUMNS = ("gpu", "dtype", "tokens", "median_tflops", "shapes", "system", "trtllm_version", "aiconfigurator_version", "source")


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
            for tokens in TOKENS:
                picked = frame[(frame["gemm_dtype"] == dtype) & (frame["m"] == tokens)]
                if picked.empty:
                    continue
                out.append({"gpu": gpu, "dtype": dtype, "tokens": str(tokens), "median_tflops": f"{picked['tflops'].median():.1f}",
                            "shapes": str(len(picked)), "system": system, "trtllm_version": release,
                            "aiconfigurator_version": version, "source": package_path(path)})
    return out


def main() -> None:
    write_table("trtllm_gemm_rate.tsv",
                "TensorRT-LLM GEMM rate (median TFLOP/s over dense-layer shapes, 4096 <= N, K <= 32768) measured on silicon,\n"
                "per GPU, GEMM dtype and M, from the perf database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is\n"
                "the file inside its package). Written by scripts/gemm_record.py; read by pipeline/planner/rates.py\n"
                "fp4_share_of_fp8() (the largest M's rows).",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

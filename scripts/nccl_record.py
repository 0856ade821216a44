#!/usr/bin/env python
"""Write pipeline/data/nccl_collective_latency.tsv: NCCL's all-gather and reduce-scatter latency as measured on silicon,
per GPU, operation, dtype, GPU count and message size, from the perf database that AIConfigurator ships
(systems/data/<system>/comm/nccl/<version>/nccl_perf.parquet, the oldest NCCL version it holds for the GPU).

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/nccl_record.py [OUT.tsv]

These are the two collectives TensorRT-LLM's PyTorch backend runs around an MoE layer under attention data parallelism
(CutlassFusedMoE.forward_chunk gathers the ranks' tokens with `allgather`, after quantizing them to FP8 or NVFP4 where the
experts run so; the outputs go back with `reducescatter`: tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py
@000a01de), both NCCL (cpp/tensorrt_llm/thop/reducescatterOp.cpp @0bd88711: ncclReduceScatter). `message_elements` counts
the whole gathered (or reduced) tensor's elements, as the table's bandwidths say (H200, 4 GPUs, 2^28 half elements: 1.29
ms, ~310 GB/s received per GPU; read as bytes it would be half NVLink's usual NCCL figure). dtype half (16-bit) or int8
(one-byte elements: FP8 and packed NVFP4). One line per (GPU, op, dtype, GPUs): sizes and latencies as comma-separated
lists.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import ADDED_SYSTEMS, SYSTEMS, origin, write_table  # noqa: E402

OPS = ("all_gather", "reduce_scatter")
COLUMNS = ("gpu", "op", "dtype", "num_gpus", "message_elements", "latency_us", "system", "nccl_version",
           "aiconfigurator_version", "source")


def rows() -> list[dict[str, str]]:
    from importlib import metadata

    import aiconfigurator_core
    import pandas as pd

    from allreduce_record import _version_key

    data = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    version = metadata.version("aiconfigurator")
    out = []
    for gpu, system in (SYSTEMS | ADDED_SYSTEMS).items():
        folder = data / system / "comm" / "nccl"
        release = sorted((p.name for p in folder.iterdir() if (p / "nccl_perf.parquet").is_file()), key=_version_key)[0]
        path = folder / release / "nccl_perf.parquet"
        frame = pd.read_parquet(path)
        frame = frame[frame["op_name"].isin(OPS)]
        for (op, dtype, gpus), measured in frame.groupby(["op_name", "nccl_dtype", "num_gpus"]):
            best = measured.groupby("message_size")["latency"].min().sort_index()
            provenance = origin(system, release, version, path)
            out.append({"gpu": gpu, "op": op, "dtype": dtype, "num_gpus": str(gpus),
                        "message_elements": ",".join(str(m) for m in best.index),
                        "latency_us": ",".join(f"{ms * 1000:.3f}" for ms in best.values),
                        "system": system, "nccl_version": release, "aiconfigurator_version": version,
                        "source": provenance["source"]})
    return out


def main() -> None:
    write_table("nccl_collective_latency.tsv",
                "NCCL all-gather and reduce-scatter latency (one call, microseconds) measured on silicon, from the perf\n"
                "database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is the file inside its package).\n"
                "message_elements: the whole gathered / reduced tensor's elements; dtype half (16-bit) or int8 (1 byte).\n"
                "Written by scripts/nccl_record.py; read by pipeline/planner/comm.py measured_collective_s() (attention\n"
                "data parallelism's gather and scatter around each MoE layer).",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Write pipeline/data/trtllm_moe_latency.tsv: the latency of TensorRT-LLM's fused MoE layer (routing, token permutation,
the grouped expert GEMMs and the finalize) as measured on silicon, per GPU, dtype, MoE shape, expert TP and token count,
from the perf database that AIConfigurator ships (systems/data/<system>/moe/trtllm/<version>/moe_perf.parquet).

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/moe_record.py [OUT.tsv]

The rows AIConfigurator itself reads by default: the CUTLASS MoE of the PyTorch flow (`moe_torch_flow_cutlass`, or
`moe_torch_flow` where the database names no other; not the min-latency or DeepGEMM variants), routing drawn from its
default power law (alpha 1.01); experts split by TP (moe_ep_size 1: how trtllm-bench builds an MoE without --ep) at
every TP the database holds, and spread by expert parallelism over 2, 4 or 8 GPUs without TP inside an expert
(moe_tp_size 1: the layout of attention data parallelism with --ep = --tp, NVIDIA's "DEP"); the dtypes the planner
plans (bfloat16, fp8, nvfp4, and for MXFP4 checkpoints w4a16_mxfp4 and w4a8_mxfp4_mxfp8); the oldest TensorRT-LLM
release each GPU's database holds. One line per (GPU, dtype, shape, TP, EP): the measured token counts and their
latencies, in microseconds, as comma-separated lists.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import ADDED_SYSTEMS, SYSTEMS, origin, perf_files, write_table  # noqa: E402

KERNELS = ("moe_torch_flow_cutlass", "moe_torch_flow")
DISTRIBUTION = "power_law_1.01"
DTYPES = ("bfloat16", "fp8", "nvfp4", "w4a16_mxfp4", "w4a8_mxfp4_mxfp8")  # the last two: MXFP4 experts (GPT-OSS)
EXPERT_PARALLEL = (2, 4, 8)  # the EP sizes of one node's GPUs the planner plans (Scenario.attention_dp: EP = TP)
SHAPE = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
COLUMNS = ("gpu", "dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp", "moe_ep", "tokens", "latency_us",
           "kernel_source", "distribution", "system", "trtllm_version", "aiconfigurator_version", "source")


def rows() -> list[dict[str, str]]:
    import pandas as pd

    version, files = perf_files("moe", "moe_perf.parquet", SYSTEMS | ADDED_SYSTEMS)
    out = []
    for gpu, system, path, release in files:
        frame = pd.read_parquet(path)
        layout = (frame["moe_ep_size"] == 1) | ((frame["moe_tp_size"] == 1) & frame["moe_ep_size"].isin(EXPERT_PARALLEL))
        frame = frame[layout & (frame["distribution"] == DISTRIBUTION)
                      & frame["kernel_source"].isin(KERNELS) & frame["moe_dtype"].isin(DTYPES)]
        for shape, measured in frame.groupby(SHAPE):
            dtype, hidden, inter, topk, experts, tp, ep = shape
            by_tokens = measured.groupby("num_tokens")["latency"].min().sort_index()
            out.append({"gpu": gpu, "dtype": dtype, "hidden_size": str(hidden), "inter_size": str(inter), "topk": str(topk),
                        "num_experts": str(experts), "moe_tp": str(tp), "moe_ep": str(ep), "tokens": ",".join(str(t) for t in by_tokens.index),
                        "latency_us": ",".join(f"{ms * 1000:.2f}" for ms in by_tokens.values),
                        "kernel_source": "+".join(sorted(measured["kernel_source"].unique())), "distribution": DISTRIBUTION,
                        **origin(system, release, version, path)})
    return out


def main() -> None:
    write_table("trtllm_moe_latency.tsv",
                "TensorRT-LLM fused MoE layer latency (routing, permutation, grouped expert GEMMs, finalize) measured on\n"
                "silicon, per GPU, dtype, shape (hidden, expert width, top-k, experts), expert TP and expert parallelism, from\n"
                "the perf database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is the file inside its package): the\n"
                "CUTLASS MoE of the PyTorch flow, power-law routing (alpha 1.01); moe_ep 1 at each expert TP, and EP 2/4/8 at\n"
                "expert TP 1. `tokens` (all ranks' tokens together: with EP each GPU runs its experts' share of them) and\n"
                "`latency_us` are comma-separated lists of the same length. Written by scripts/moe_record.py; read by pipeline/planner/moe_timing.py\n"
                "measured_moe_s() (the PyTorch backend's routed experts).",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

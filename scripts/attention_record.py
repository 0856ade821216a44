#!/usr/bin/env python
"""Write pipeline/data/trtllm_decode_attention_bandwidth.tsv: the bandwidth at which TensorRT-LLM's decode attention
reads the KV cache on silicon, per GPU, KV-cache dtype and attention shape, from the perf database that AIConfigurator
ships (systems/data/<system>/attention/trtllm/<version>/generation_attention_perf.parquet).

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/attention_record.py [OUT.tsv]

Per GPU, KV dtype, head_dim, query heads and KV heads (per GPU, as one rank runs them; full attention, KV heads <= 16):
the median over the measured points with 64 <= batch <= 1024 and a KV length of 1000 to 9000 tokens (where the kernel is
bound by its reads, the regime of max-load decoding) of KV bytes read (2 x batch x KV length x KV heads x head_dim x
bytes per element) over the measured latency; and the table's provenance as AIConfigurator records it (collection_meta.yaml).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import origin, perf_files, write_table  # noqa: E402

BATCH = (64, 1024)
KV_LENGTH = (1000, 9000)
MAX_KV_HEADS = 16
KV_BYTES = {"bfloat16": 2, "fp8": 1}
COLUMNS = ("gpu", "kv_dtype", "head_dim", "heads", "kv_heads", "median_gbps", "points", "system", "trtllm_version",
           "provenance", "aiconfigurator_version", "source")


def provenance(path: Path) -> str:
    """How AIConfigurator says this table came about (collection_meta.yaml beside it: "collected" or "legacy")."""
    meta = path.parent / "collection_meta.yaml"
    for line in meta.read_text(encoding="utf-8").splitlines() if meta.is_file() else []:
        if line.startswith("provenance:"):
            return line.split(":", 1)[1].strip()
    return ""


def rows() -> list[dict[str, str]]:
    import pandas as pd

    version, files = perf_files("attention", "generation_attention_perf.parquet")
    out = []
    for gpu, system, path, release in files:
        frame = pd.read_parquet(path)
        frame = frame[(frame["window_size"] == 0) & (frame["beam_width"] == 1) & (frame["num_key_value_heads"] <= MAX_KV_HEADS)
                      & frame["kv_cache_dtype"].isin(list(KV_BYTES))]
        kv_length = frame["isl"] + frame["step"]
        frame = frame[frame["batch_size"].between(*BATCH) & kv_length.between(*KV_LENGTH)]
        kv_bytes = (2 * frame["batch_size"] * (frame["isl"] + frame["step"]) * frame["num_key_value_heads"] * frame["head_dim"]
                    * frame["kv_cache_dtype"].map(KV_BYTES))
        frame = frame.assign(gbps=kv_bytes / (frame["latency"] * 1e-3) / 1e9)
        keys = ["kv_cache_dtype", "head_dim", "num_heads", "num_key_value_heads"]
        for (dtype, head_dim, heads, kv_heads), group in frame.groupby(keys):
            out.append({"gpu": gpu, "kv_dtype": dtype, "head_dim": str(head_dim), "heads": str(heads), "kv_heads": str(kv_heads),
                        "median_gbps": f"{group['gbps'].median():.0f}", "points": str(len(group)),
                        "provenance": provenance(path), **origin(system, release, version, path)})
    return out


def main() -> None:
    write_table("trtllm_decode_attention_bandwidth.tsv",
                "TensorRT-LLM decode attention: the KV-cache read bandwidth (median GB/s over 64 <= batch <= 1024 and KV lengths\n"
                "of 1000-9000 tokens) measured on silicon, per GPU, KV dtype and per-rank attention shape, from the perf\n"
                "database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is the file inside its package). Written by\n"
                "scripts/attention_record.py; read by pipeline/planner/rates.py kv_read_fraction().",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

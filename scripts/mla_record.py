#!/usr/bin/env python
"""Write pipeline/data/trtllm_mla_decode_latency.tsv: what TensorRT-LLM's decode attention costs for multi-head latent
attention (DeepSeek's MLA, the absorbed form over the latent cache) on silicon, per GPU, KV-cache dtype and query heads
per rank, from the perf database that AIConfigurator ships (systems/data/<system>/mla/trtllm/<version>/
generation_mla_perf.parquet; its num_heads are one rank's, its shapes DeepSeek-V3's: a 512 + 64 latent).

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/mla_record.py [OUT.tsv]

One layer's latency over a batch of decoding sequences is fitted, by relative least squares over the measured points with
64 <= batch <= 1024 and KV lengths of 1023 to 16383 tokens (max-load decoding), as a cost per call, per sequence and per
cached token attended, none negative: latency = per_call_us + per_sequence_us x batch + per_cached_token_ns x batch x KV
length. All three are recorded, with the fit's worst relative miss over those points and the table's provenance
(collection_meta.yaml).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import ADDED_SYSTEMS, SYSTEMS, origin, perf_files  # noqa: E402
from allreduce_record import write_table  # noqa: E402
from attention_record import provenance  # noqa: E402

BATCH = (64, 1024)
KV_LENGTH = (1023, 16383)
# every GPU whose database holds MLA decode timings (A100's and L40S's are TensorRT-LLM 1.0's, the rest 1.3.0rc20's)
MLA_SYSTEMS = {**SYSTEMS, **ADDED_SYSTEMS}
COLUMNS = ("gpu", "kv_dtype", "heads", "per_call_us", "per_sequence_us", "per_cached_token_ns", "worst_miss_pct", "points", "system",
           "trtllm_version", "provenance", "aiconfigurator_version", "source")


def _fit(terms, seconds):
    """Non-negative coefficients of `terms` (one column per cost) that best fit `seconds` relatively (each point weighs
    as much as any other, short and long alike): the best least-squares fit over the subsets of terms whose own fit is
    non-negative, the terms left out at zero."""
    import itertools

    import numpy as np

    best, best_error = np.zeros(terms.shape[1]), np.inf
    for size in range(1, terms.shape[1] + 1):
        for subset in itertools.combinations(range(terms.shape[1]), size):
            design = terms[:, subset] / seconds[:, None]
            coefficients, *_ = np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)
            error = float(np.sum((design @ coefficients - 1) ** 2))
            if (coefficients >= 0).all() and error < best_error:
                best, best_error = np.zeros(terms.shape[1]), error
                best[list(subset)] = coefficients
    return best


def rows() -> list[dict[str, str]]:
    import numpy as np
    import pandas as pd

    version, files = perf_files("mla", "generation_mla_perf.parquet", MLA_SYSTEMS)
    out = []
    for gpu, system, path, release in files:
        frame = pd.read_parquet(path)
        kv_length = frame["isl"] + frame["step"]
        frame = frame[frame["batch_size"].between(*BATCH) & kv_length.between(*KV_LENGTH)]
        for (dtype, heads), group in frame.groupby(["kv_cache_dtype", "num_heads"]):
            batch = group["batch_size"].to_numpy(float)
            attended = batch * (group["isl"] + group["step"]).to_numpy(float)
            seconds = group["latency"].to_numpy(float) * 1e-3
            # relative least squares: each point weighs as much as any other, short and long alike
            per_call, per_sequence, per_token = _fit(np.stack([np.ones_like(batch), batch, attended], axis=1), seconds)
            miss = np.abs((per_call + per_sequence * batch + per_token * attended) / seconds - 1).max()
            out.append({"gpu": gpu, "kv_dtype": dtype, "heads": str(heads), "per_call_us": f"{per_call * 1e6:.2f}",
                        "per_sequence_us": f"{per_sequence * 1e6:.4f}",
                        "per_cached_token_ns": f"{per_token * 1e9:.5f}", "worst_miss_pct": f"{100 * miss:.1f}",
                        "points": str(len(group)), "provenance": provenance(path), **origin(system, release, version, path)})
    return out


def main() -> None:
    write_table("trtllm_mla_decode_latency.tsv",
                "TensorRT-LLM decode attention for multi-head latent attention (DeepSeek-V3's 512 + 64 latent, absorbed form):\n"
                "one layer's latency fitted as per_call_us + per_sequence_us x batch + per_cached_token_ns x batch x KV length over the\n"
                "points measured on silicon with 64 <= batch <= 1024 and KV lengths of 1023-16383 tokens, per GPU, KV dtype and\n"
                "query heads per rank, from the perf database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is the\n"
                "file inside its package; worst_miss_pct: the fit's worst relative miss over those points). Written by\n"
                "scripts/mla_record.py; read by pipeline/planner/latent.py.",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

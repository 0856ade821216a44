#!/usr/bin/env python
"""Write pipeline/data/trtllm_allreduce_latency.tsv: TensorRT-LLM's custom all-reduce latency as measured on
silicon, per GPU, TP size and message size, from the perf database that AIConfigurator ships.

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/allreduce_record.py [OUT.tsv]

For each of our GPUs it reads `systems/data/<system>/comm/trtllm/<version>/custom_allreduce_perf.parquet` of the
oldest TensorRT-LLM version the database holds (the nearest to the releases of the published rows), bfloat16.
"""

from __future__ import annotations

import csv
import sys
from importlib import metadata
from pathlib import Path

# our gpus.json key -> AIConfigurator's system folder
SYSTEMS = {"a100-80gb": "a100_sxm", "h100-sxm": "h100_sxm", "h200": "h200_sxm", "l40s": "l40s", "b200": "b200_sxm"}
# GPUs whose published rows no fit sees (pipeline/data/gpus_added.tsv). Only the tables the planner reads for that GPU
# alone take them (this one, moe_record's): the GEMM-rate and decode-attention tables also give the medians that GPUs
# without figures of their own fall back to, so adding GPUs there would move every figure quoted for those.
ADDED_SYSTEMS = {"gb200": "gb200", "rtx-pro-6000": "rtx_pro_6000_server"}
COLUMNS = ("gpu", "tp", "message_elements", "latency_us", "dtype", "system", "trtllm_version", "aiconfigurator_version",
           "source")


def _version_key(text: str) -> tuple:
    parts = text.replace("rc", ".rc.").replace("post", ".post.").split(".")
    return tuple((0, int(p)) if p.isdigit() else (-1, p) for p in parts)


def perf_files(kind: str, name: str, systems: dict[str, str] = SYSTEMS) -> tuple[str, list[tuple[str, str, Path, str]]]:
    """AIConfigurator's version and, per GPU of `systems`, (gpu key, system, path, release) of the `name` parquet under
    systems/data/<system>/<kind>/trtllm/<release>/ for the oldest release the database holds (nearest the published rows)."""
    import aiconfigurator_core

    data = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    found = []
    for gpu, system in systems.items():
        folder = data / system / kind / "trtllm"
        releases = sorted((p.name for p in folder.iterdir() if (p / name).is_file()), key=_version_key)
        found.append((gpu, system, folder / releases[0] / name, releases[0]))
    return metadata.version("aiconfigurator"), found


def package_path(path: Path) -> str:
    """A perf file's path inside AIConfigurator's package (systems/data/...)."""
    return str(Path(*path.parts[path.parts.index("systems"):]))


def origin(system: str, release: str, version: str, path: Path) -> dict[str, str]:
    """The provenance columns every recorded row carries: AIConfigurator's system, the TensorRT-LLM release its perf
    database measured, AIConfigurator's version and the file inside its package."""
    return {"system": system, "trtllm_version": release, "aiconfigurator_version": version, "source": package_path(path)}


def write_table(name: str, header: str, columns: tuple[str, ...], table: list[dict[str, str]]) -> None:
    """Write `table` to argv[1] or pipeline/data/<name>: `header`'s lines as # comments, then the tab-separated rows."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "pipeline" / "data" / name
    with open(out, "w", newline="", encoding="utf-8") as handle:
        handle.writelines(f"# {line}\n" for line in header.splitlines())
        writer = csv.DictWriter(handle, fieldnames=columns, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    print(f"{len(table)} rows -> {out}")


def rows() -> list[dict[str, str]]:
    import pandas as pd

    version, files = perf_files("comm", "custom_allreduce_perf.parquet", SYSTEMS | ADDED_SYSTEMS)
    out = []
    for gpu, system, path, release in files:
        frame = pd.read_parquet(path)
        frame = frame[frame["allreduce_dtype"] == "bfloat16"]
        best = frame.groupby(["num_gpus", "message_size"], as_index=False)["latency"].min()
        for record in best.sort_values(["num_gpus", "message_size"]).itertuples():
            out.append({"gpu": gpu, "tp": str(record.num_gpus), "message_elements": str(record.message_size),
                        "latency_us": f"{record.latency * 1000:.3f}", "dtype": "bfloat16",
                        **origin(system, release, version, path)})
    return out


def main() -> None:
    write_table("trtllm_allreduce_latency.tsv",
                "TensorRT-LLM custom all-reduce latency (one call, microseconds) measured on silicon, from the perf\n"
                "database in NVIDIA's AIConfigurator (PyPI aiconfigurator; `source` is the file inside its package).\n"
                "Written by scripts/allreduce_record.py; read by pipeline/planner/comm.py measured_allreduce_s() (NVLink GPUs; the L40S rows are kept to show why not PCIe).",
                COLUMNS, rows())


if __name__ == "__main__":
    main()

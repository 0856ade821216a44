"""What the convert stage answers and records: the ConvertResult read from a plan and its manifest,
the process's peak memory, and the package versions a checkpoint's identity includes."""

from __future__ import annotations

import resource
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from pipeline.convert.spec import ConvertDecisions, ConvertResult


def convert_result(plan: ConvertDecisions, manifest: dict[str, Any], *, skipped: bool, started: float, device: Optional[str] = None) -> ConvertResult:
    files = manifest.get("files") or {}
    ranks = sum(1 for name in files if name.startswith("rank") and name.endswith(".safetensors"))
    size = sum(int(meta.get("size", 0)) for meta in files.values())
    return ConvertResult(
        model=plan.model,
        ckpt_id=plan.ckpt_id,
        path=plan.out,
        hf_dir=plan.hf_dir,
        quant=plan.fmt.name,
        kv_cache=plan.kv.name,
        tp=int(plan.inputs["tp"]),
        pp=int(plan.inputs["pp"]),
        dtype=plan.dtype,
        quant_algo=manifest.get("quant_algo"),
        kv_cache_quant_algo=manifest.get("kv_cache_quant_algo"),
        ranks=ranks,
        bytes=size,
        calibration=plan.calibration.summary() if plan.calibration else None,
        skipped=skipped,
        duration_s=round(time.time() - started, 3),
        peak_rss_mb=None if skipped else manifest.get("peak_rss_mb"),
        device=device,
        format=plan.format,
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB: VmHWM of its own address space
    (getrusage's ru_maxrss also carries a parent's peak across fork and exec); ru_maxrss elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def package_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

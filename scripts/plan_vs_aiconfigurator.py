"""AIConfigurator's estimate beside the planner's, for rows of the published table (optional: the project does not
need it; `pip install '.[aiconfigurator]'`). Used by scripts/plan_vs_published.py --aiconfigurator.

AIConfigurator 0.12's `aiconfigurator cli estimate` predicts one aggregated configuration at a given batch size
from its per-GPU silicon tables; trtllm-bench's max-load runs choose the batch themselves. So each row is asked
at the batch the planner's memory model says the KV cache holds (the row's `batch`), with the row's TP, ISL/OSL and
precision (FP8 rows: FP8 GEMMs and an FP8 KV cache; FP4: NVFP4; FP16: 16-bit), and its tokens/s are compared with
the published figure like ours.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline import planner as P

# Our GPU keys -> AIConfigurator's system names (the folders of aiconfigurator_core/systems/data in 0.12).
SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "l40s": "l40s", "a100-80gb": "a100_sxm"}
QUANT = {"FP8": ("fp8", "fp8"), "FP4": ("nvfp4", "fp8"), "FP16": ("bfloat16", "bfloat16"), "BF16": ("bfloat16", "bfloat16")}
_TOKENS = re.compile(r"^\s*tokens/s:\s*([\d,.]+)", re.MULTILINE)


def _model_folder(name: str, root: Path) -> Path:
    folder = root / name
    if not folder.is_dir():
        folder.mkdir(parents=True)
        raw = json.loads(resources.files("pipeline.data").joinpath("published_models", f"{name}.json").read_text(encoding="utf-8"))
        (folder / "config.json").write_text(json.dumps({k: v for k, v in raw.items() if not k.startswith("_")}), encoding="utf-8")
    return folder


def estimate(row: dict[str, Any], root: Path, binary: str) -> float | None:
    """AIConfigurator's tokens/s (total) for one compared row, or None where it has no system or fails."""
    system = SYSTEMS.get(row["gpu"])
    if system is None:
        return None
    gemm, kv = QUANT[row["precision"]]
    command = [binary, "cli", "estimate", "--model-path", str(_model_folder(row["model"], root)), "--system", system,
               "--backend", "trtllm", "--estimate-mode", "agg", "--isl", str(row["isl"]), "--osl", str(row["osl"]),
               "--batch-size", str(row["batch"]), "--tp-size", str(row["tp"]), "--gemm-quant-mode", gemm,
               "--kvcache-quant-mode", kv, "--free-gpu-memory-fraction", "0.95"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        return None
    match = _TOKENS.search(done.stdout + done.stderr)
    return float(match.group(1).replace(",", "")) if match and done.returncode == 0 else None


def annotate(comparison: list[dict[str, Any]]) -> str:
    """Add `aiconfigurator` (its error, e.g. "+12.3%") and `aiconfigurator_tokens_per_s` to each row it can estimate;
    return one line: per GPU, its median and worst |error| beside ours, or why there is none."""
    binary = shutil.which("aiconfigurator")
    if binary is None:
        return "not installed (pip install '.[aiconfigurator]')"
    per_gpu: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="aic-models-") as tmp:
        for row in comparison:
            tokens = estimate(row, Path(tmp), binary)
            if tokens is None:
                continue
            error = round(100 * (tokens - row["published_tokens_per_s"]) / row["published_tokens_per_s"], 2)
            row["aiconfigurator_tokens_per_s"], row["aiconfigurator"] = tokens, f"{error:+.1f}%"
            per_gpu.setdefault(row["gpu"], []).append((abs(error), abs(row["error_pct"])))
    if not per_gpu:
        return "installed, but it estimated none of these rows"
    parts = []
    for gpu, pairs in sorted(per_gpu.items()):
        theirs = [{"error_pct": a} for a, _ in pairs]
        ours = [{"error_pct": b} for _, b in pairs]
        parts.append(f"{gpu} ({len(pairs)} rows): AIConfigurator median {P.median_abs_pct_error(theirs):.1f}% worst "
                     f"{max(a for a, _ in pairs):.1f}%, ours median {P.median_abs_pct_error(ours):.1f}% worst {max(b for _, b in pairs):.1f}%")
    return "; ".join(parts)

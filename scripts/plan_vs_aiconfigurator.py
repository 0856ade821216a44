"""AIConfigurator's estimate beside the planner's, for rows of the published table (the project does not need it).

By default the comparison reads the RECORDED predictions, pipeline/data/aiconfigurator_predictions.tsv (AIConfigurator's
version, its perf-database version, the command and the date on every row): a full rerun takes about 40 minutes.
`scripts/plan_vs_published.py --rerun-aiconfigurator` asks AIConfigurator again (it must be installed: `pip install
'.[aiconfigurator]'`, or name its Python with --aiconfigurator-python) and rewrites that table, one row at a time
(scripts/aiconfigurator_record.py, run under AIConfigurator's own Python, with a timeout per row).

AIConfigurator 0.12's `aiconfigurator cli estimate` predicts one aggregated configuration at a given batch size from
its per-GPU silicon tables; trtllm-bench's max-load runs choose the batch themselves. So each row is asked at the batch
the planner's memory model says the KV cache holds (the row's `batch`), with the row's TP, ISL/OSL and precision (FP8
rows: FP8 GEMMs and an FP8 KV cache; FP4: NVFP4; FP16: 16-bit), and its tokens/s (the TP group's total) is compared with
the published figure like ours. Its `trtllm` backend models TensorRT-LLM's PyTorch flow of its database version; the
same estimate stands beside both backends' rows.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline import planner as P
from pipeline.data import fact_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import ADDED_SYSTEMS, SYSTEMS as FITTED_SYSTEMS  # noqa: E402

TABLE = "aiconfigurator_predictions.tsv"  # in pipeline/data
# Our GPU keys -> AIConfigurator's system names (the folders of aiconfigurator_core/systems/data in 0.12): the GPUs the
# recorders read silicon tables for, those of the fits and those no fit sees.
SYSTEMS = FITTED_SYSTEMS | ADDED_SYSTEMS
QUANT = {"FP8": ("fp8", "fp8"), "FP4": ("nvfp4", "fp8"), "FP16": ("bfloat16", "bfloat16"), "BF16": ("bfloat16", "bfloat16")}
KEY = ("backend", "model", "gpu", "tp", "pp", "precision", "isl", "osl")
UNSUPPORTED = {"MistralForCausalLM"}  # architectures AIConfigurator 0.12 refuses ("not supported"): not asked
PROVENANCE = ("aiconfigurator_version", "database_version", "system", "command", "date", "status")
_HEADER = """\
# NVIDIA AIConfigurator's estimate for the rows of trtllm_published_throughput.tsv, trtllm_published_throughput_more_models.tsv
# and trtllm_published_throughput_more_gpus.tsv (MoE models with their experts split by TP, --moe-tp-size TP --moe-ep-size 1, as
# trtllm-bench built them; AIConfigurator 0.12 does not support Mistral's architecture), and of trtllm_published_throughput_dep.tsv
# and trtllm_published_throughput_mla.tsv (DeepSeek R1, DEP too)
# (attention data parallel: --tp-size 1 --attention-dp-size TP --moe-tp-size 1 --moe-ep-size TP, batch per GPU); an MoE's experts
# at the row's precision (--moe-quant-mode: without it AIConfigurator runs them in BF16 for a config without a
# quantization_config; the FP8/FP4 MoE rows were asked again with it, --record-missing-aiconfigurator), recorded by
# `scripts/plan_vs_published.py --rerun-aiconfigurator` (scripts/aiconfigurator_record.py: aiconfigurator.cli.api.cli_estimate,
# what `aiconfigurator cli estimate` runs; `command` is that command line). Per row: AIConfigurator's version, the perf
# database it loaded (system, database_version), the date, and `status` (ok, or why there is no figure: an OOM is
# AIConfigurator's own memory check). batch: the planner's KV-capacity batch, asked as --batch-size; tokens/s: the TP group's
# total. The model folders hold config.json from pipeline/data/published_models/<model>.json (keys starting with `_` dropped).
# A row that both the 1.0 and the 1.2-dev pages publish (1000/1000 at the same model, GPU, TP and precision) is asked
# once per page, with the same answer; so is a row of trtllm_published_throughput_0_20.tsv (TensorRT-LLM 0.20's runs) that a
# later page publishes at the same model, GPU, TP, precision and ISL/OSL. The rows of trtllm_published_throughput_pp.tsv
# (pipeline stages, `pp` above 1; every other row has pp 1) were added with --record-missing-aiconfigurator: --pp-size PP,
# and --batch-size one micro-batch's (the planner's batch over PP, and over TP too for the DEP ones), as AIConfigurator's
# agg estimate counts PP micro-batches in flight. A row whose checkpoint left layers unquantized (`checkpoint_excludes`:
# DeepSeek R1's NVFP4 rows) is asked with a model folder of its own whose hf_quant_config.json names them as ModelOpt's
# exclude_modules, which AIConfigurator reads (the 10 rows re-asked so with --record-missing-aiconfigurator).
"""


# the ModelOpt quant_algo of a published precision, for a checkpoint's hf_quant_config.json
MODELOPT_ALGO = {"FP4": "NVFP4", "FP8": "FP8"}


def quant_modes(row: dict[str, Any]) -> tuple[str, str]:
    """(--gemm-quant-mode, --kvcache-quant-mode) of a published row. MXFP4 (GPT-OSS as OpenAI ships it): 16-bit GEMMs, the
    experts' MXFP4 read by AIConfigurator from the config's quantization_config, the KV cache of the scenario the planner
    runs (published.published_scenario: FP8, 16-bit on Hopper)."""
    if row["precision"] == "MXFP4":
        kv = P.published_scenario(P.published_model(row["model"]), row).kv.name
        return "bfloat16", "fp8" if kv == "fp8" else "bfloat16"
    return QUANT[row["precision"]]


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row.get(k) or 1) if k == "pp" else str(row[k]) for k in KEY)  # compared rows name pp only above 1


def recorded_predictions(text: str | None = None) -> dict[tuple[str, ...], dict[str, str]]:
    """The recorded table (pipeline/data/aiconfigurator_predictions.tsv, or `text`), keyed by the published row."""
    text = text if text is not None else resources.files("pipeline.data").joinpath(TABLE).read_text(encoding="utf-8")
    return {_key(r): r for r in fact_rows(text)}


def annotate(comparison: list[dict[str, Any]], recorded: dict[tuple[str, ...], dict[str, str]] | None = None) -> dict[str, Any]:
    """Add `aiconfigurator_tokens_per_s` and `aiconfigurator` (its error, e.g. "+12.3%") to each row the recorded table
    estimates; return where the figures come from and how many rows have one."""
    recorded = recorded if recorded is not None else recorded_predictions()
    matched = 0
    versions: set[tuple[str, str]] = set()
    for row in comparison:
        entry = recorded.get(_key(row))
        if entry is None or not entry["status"].startswith("ok"):
            continue
        tokens = float(entry["aiconfigurator_tokens_per_s"])
        error = round(100 * (tokens - row["published_tokens_per_s"]) / row["published_tokens_per_s"], 2)
        row["aiconfigurator_tokens_per_s"], row["aiconfigurator_error_pct"], row["aiconfigurator"] = tokens, error, f"{error:+.1f}%"
        versions.add((entry["aiconfigurator_version"], entry["database_version"]))
        matched += 1
    return {"source": f"pipeline/data/{TABLE}", "versions": sorted(f"{v} (database {d})" for v, d in versions),
            "rows_estimated": matched, "rows": len(comparison)}


def side_by_side(
    comparison: list[dict[str, Any]], held_out: dict[tuple[str, ...], float] | None = None, key: Any = None,
) -> list[dict[str, Any]]:
    """Per GPU, over the rows AIConfigurator estimates: its median and worst |error| beside ours (in sample, and held
    out when `held_out` maps a row's `key(row)` (default: the table's key) to its error with that row's GPU held out)."""
    key = key or _key
    per_gpu: dict[str, list[dict[str, Any]]] = {}
    for row in comparison:
        if "aiconfigurator_error_pct" in row:
            per_gpu.setdefault(row["gpu"], []).append(row)
    out = []
    for gpu, rows in sorted(per_gpu.items()):
        entry = {"gpu": gpu, "rows": len(rows), **_stats("aiconfigurator", [r["aiconfigurator_error_pct"] for r in rows]),
                 **_stats("ours_in_sample", [r["error_pct"] for r in rows])}
        if held_out is not None:
            entry.update(_stats("ours_gpu_held_out", [held_out[key(r)] for r in rows]))
        out.append(entry)
    return out


def asked_batch(row: dict[str, Any]) -> int:
    """The batch AIConfigurator is asked for a compared row: one GPU's under attention data parallelism, one micro-batch's
    with pipeline stages (its agg estimate counts pp of them in flight), else the planner's batch."""
    pp = int(row.get("pp") or 1)
    if row.get("attention_dp"):
        return max(1, row["batch"] // (row["tp"] * pp))
    return max(1, row["batch"] // pp) if pp > 1 else row["batch"]


def same_batch(comparison: list[dict[str, Any]], recorded: dict[tuple[str, ...], dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """The rows AIConfigurator estimated at the planner's own batch as it stands (a row it answered at a halved batch, or
    recorded when the planner's batch was another, is left out): ours over its figure, as error_pct. Both then price the
    same iterations, so this compares the two models' arithmetic, not the runs' settings."""
    recorded = recorded if recorded is not None else recorded_predictions()
    out = []
    for row in comparison:
        theirs = recorded.get(_key(row))
        if theirs and theirs["status"] == "ok" and int(theirs["batch"]) == asked_batch(row):
            ratio = row["predicted_tokens_per_s"] / float(theirs["aiconfigurator_tokens_per_s"])
            out.append({**row, "error_pct": round(100 * (ratio - 1), 2)})
    return out


def _stats(name: str, errors: list[float]) -> dict[str, float]:
    return {f"{name}_median_abs_pct_error": round(P.median_abs_pct_error([{"error_pct": e} for e in errors]), 2),
            f"{name}_max_abs_pct_error": max(abs(e) for e in errors)}


def jobs(comparison: list[dict[str, Any]], models_root: Path) -> list[dict[str, Any]]:
    """What scripts/aiconfigurator_record.py asks, one job per compared row: 70B FP8 on H100/H200 and L40S first."""
    def priority(row: dict[str, Any]) -> int:
        if "70b" in row["model"] and row["precision"] == "FP8" and row["gpu"] in ("h100-sxm", "h200"):
            return 0
        return 1 if row["gpu"] == "l40s" else 2

    out = []
    asked = [r for r in comparison if r["gpu"] in SYSTEMS and P.published_model(r["model"]).architecture not in UNSUPPORTED]
    for row in sorted(asked, key=priority):
        raw = json.loads(resources.files("pipeline.data").joinpath("published_models", f"{row['model']}.json").read_text(encoding="utf-8"))
        config = {k: v for k, v in raw.items() if not k.startswith("_")}
        folder = models_root / row["model"]
        if row.get("checkpoint_excludes"):  # the run's checkpoint left these layers unquantized: said as ModelOpt says it
            folder = models_root / f"{row['model']}-{row['precision'].lower()}"
            folder.mkdir(parents=True, exist_ok=True)
            quantization = {"quant_algo": MODELOPT_ALGO[row["precision"]], "exclude_modules": list(row["checkpoint_excludes"])}
            (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": quantization}), encoding="utf-8")
            config = {**config, "_hf_quant_config": quantization}  # in the hash below only
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if not k.startswith("_")}), encoding="utf-8")
        gemm, kv = quant_modes(row)
        # experts split by TP, no EP (trtllm-bench's default); DEP rows: attention DP, experts over the GPUs, batch per GPU
        spec = P.published_model(row["model"])
        moe = {"moe_tp": row["tp"]} if spec.moe_layer_count else {}
        pp = int(row.get("pp") or 1)
        if row.get("attention_dp"):
            moe = {"attention_dp": True, "batch": asked_batch(row)}
        elif pp > 1:
            moe = {**moe, "batch": asked_batch(row)}
        if spec.moe_layer_count and row["precision"] != "MXFP4":  # the experts at the row's precision, as its checkpoint
            moe["moe_quant"] = gemm  # holds them (AIConfigurator's default for a config without quantization_config: BF16)
        out.append({**{k: row[k] for k in (*KEY, "batch") if k != "pp"}, "pp": pp, **moe, "system": SYSTEMS[row["gpu"]], "gemm": gemm, "kv": kv,
                    "model_dir": str(folder), "config_hash": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]})
    return out


def rerun(comparison: list[dict[str, Any]], python: str | None, table: Path, timeout_s: int = 300, *, keep: bool = False) -> None:
    """Ask AIConfigurator again for every compared row and write `table` (the header, then one row per job); keep: only
    for the rows `table` lacks, its recorded rows kept as they are (the recorder skips the rows its output already has)."""
    python = python or _aiconfigurator_python()
    scripts = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="aic-") as tmp:
        job_file, raw = Path(tmp) / "jobs.json", Path(tmp) / "predictions.tsv"
        if keep and table.exists():
            raw.write_text("".join(line for line in table.read_text(encoding="utf-8").splitlines(keepends=True)
                                   if not line.startswith("#")), encoding="utf-8")
        job_file.write_text(json.dumps(jobs(comparison, Path("build/reports/aiconfigurator_models"))), encoding="utf-8")
        subprocess.run([python, str(scripts / "aiconfigurator_record.py"), str(job_file), str(raw), "--timeout", str(timeout_s)],
                       check=True)
        table.write_text(_HEADER + raw.read_text(encoding="utf-8"), encoding="utf-8")


def _aiconfigurator_python() -> str:
    binary = shutil.which("aiconfigurator")
    if binary is None:
        sys.exit("AIConfigurator is not installed: pip install '.[aiconfigurator]', or pass --aiconfigurator-python PATH "
                 "(the recorded predictions in pipeline/data/aiconfigurator_predictions.tsv need neither).")
    first = Path(binary).read_text(encoding="utf-8", errors="replace").splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else sys.executable

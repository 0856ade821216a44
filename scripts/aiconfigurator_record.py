#!/usr/bin/env python
"""Record AIConfigurator's estimate for rows of the published table, one TSV line per row as each finishes.

Run with AIConfigurator's own Python (it needs nothing from the pipeline), on a job list that
`scripts/plan_vs_aiconfigurator.py --record` writes:

    /path/to/aic-venv/bin/python scripts/aiconfigurator_record.py JOBS.json OUT.tsv [--timeout 300]

Each job is asked in-process through `aiconfigurator.cli.api.cli_estimate` (what `aiconfigurator cli estimate`
calls), so the perf database is loaded once per system instead of once per row; the equivalent command line is
written beside each prediction. A row that fails or runs past --timeout is written with its status and no figure.
A row already in OUT.tsv is skipped, so an interrupted run resumes. Where AIConfigurator's own memory check refuses the
planner's batch (OOM), the batch is halved until it fits, and the status says so (`batch` is then the one asked).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import signal
import sys
from importlib import metadata
from pathlib import Path

COLUMNS = ("backend", "model", "gpu", "tp", "pp", "precision", "isl", "osl", "batch", "aiconfigurator_tokens_per_s", "status",
           "aiconfigurator_version", "system", "database_version", "date", "command")
KEY = ("backend", "model", "gpu", "tp", "pp", "precision", "isl", "osl")


class _Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise _Timeout


def parallelism(job: dict) -> dict:
    """A job's parallelism: --tp-size TP, and for an MoE (its `moe_tp` key) the experts split by TP and not by EP, as
    trtllm-bench builds them without --ep; a DEP job (its `attention_dp` key, the published DEP rows) attention data
    parallel over the TP GPUs with the experts spread over them (--tp-size 1 --attention-dp-size TP --moe-tp-size 1
    --moe-ep-size TP; its batch is then each GPU's, as AIConfigurator counts it); with pipeline stages (its `pp`), --pp-size
    as well (its batch then one micro-batch's: AIConfigurator's agg throughput counts pp of them in flight)."""
    stages = {"pp_size": job["pp"]} if int(job.get("pp", 1)) > 1 else {}
    if job.get("attention_dp"):
        return {"tp_size": 1, "attention_dp_size": job["tp"], "moe_tp_size": 1, "moe_ep_size": job["tp"], **stages}
    return {"tp_size": job["tp"], **({"moe_tp_size": job["moe_tp"], "moe_ep_size": 1} if job.get("moe_tp") else {}), **stages}


def command_line(job: dict) -> str:
    parallel = "".join(f" --{key.replace('_', '-')} {value}" for key, value in parallelism(job).items())
    return (f"aiconfigurator cli estimate --model-path {job['model_dir']} --system {job['system']} --backend trtllm "
            f"--estimate-mode agg --isl {job['isl']} --osl {job['osl']} --batch-size {job['batch']}{parallel} "
            f"--gemm-quant-mode {job['gemm']} --kvcache-quant-mode {job['kv']}"
            + (f" --moe-quant-mode {job['moe_quant']}" if job.get("moe_quant") else "") + " --free-gpu-memory-fraction 0.95")


def estimate(job: dict, timeout: int) -> tuple[str, str, str]:
    """(tokens/s total, status, database version) for one job."""
    from aiconfigurator.cli.api import cli_estimate

    signal.alarm(timeout)
    try:
        result = cli_estimate(model_path=job["model_dir"], system_name=job["system"], mode="agg", backend_name="trtllm",
                              isl=job["isl"], osl=job["osl"], batch_size=job["batch"],
                              gemm_quant_mode=job["gemm"], kvcache_quant_mode=job["kv"], free_gpu_memory_fraction=0.95,
                              **parallelism(job), **({"moe_quant_mode": job["moe_quant"]} if job.get("moe_quant") else {}))
        return f"{result.tokens_per_second:.2f}", "ok", str(result.backend_version)
    except _Timeout:
        return "", f"timeout>{timeout}s", ""
    except Exception as exc:  # noqa: BLE001 - recorded, not hidden: the row says why it has no figure
        return "", f"error: {type(exc).__name__}: {str(exc)[:120]}".replace("\t", " ").replace("\n", " "), ""
    finally:
        signal.alarm(0)


def fitting_estimate(job: dict, timeout: int) -> tuple[str, str, str, int]:
    """estimate() at the job's batch, halved while AIConfigurator reports OOM; the batch it answered at is the fourth."""
    batch = job["batch"]
    tokens, status, db = estimate(job, timeout)
    while status.startswith("error: RuntimeError: OOM") and batch > 1:
        batch //= 2
        tokens, status, db = estimate({**job, "batch": batch}, timeout)
    if batch != job["batch"] and status == "ok":
        status = f"ok (batch {job['batch']} is OOM for AIConfigurator; halved to {batch})"
    return tokens, status, db, batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("jobs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per row")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    jobs = json.loads(args.jobs.read_text(encoding="utf-8"))
    done: set[tuple[str, ...]] = set()
    if args.out.exists():
        with open(args.out, encoding="utf-8") as handle:
            done = {tuple(r.get(k) or "1" for k in KEY)  # a table recorded before the pp column: one stage
                    for r in csv.DictReader((l for l in handle if not l.startswith("#")), delimiter="\t")}
    new = not args.out.exists()
    version = metadata.version("aiconfigurator")
    cache: dict[tuple, tuple[str, str, str]] = {}
    with open(args.out, "a", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle, delimiter="\t", lineterminator="\n")
        if new:
            out.writerow(COLUMNS)
        for job in jobs:
            job = {"pp": 1, **job}
            if tuple(str(job[k]) for k in KEY) in done:
                continue
            same = (job["config_hash"], job["system"], job["tp"], job["pp"], job["gemm"], job["kv"], job["isl"], job["osl"],
                    job["batch"], bool(job.get("attention_dp")), job.get("moe_quant"))
            if same not in cache:
                cache[same] = fitting_estimate(job, args.timeout)
            tokens, status, db, asked = cache[same]
            job = {**job, "batch": asked}
            out.writerow([*(job[k] for k in KEY), asked, tokens, status, version, job["system"], db,
                          dt.date.today().isoformat(), command_line(job)])
            handle.flush()
            print(f"{job['backend']} {job['model']} {job['gpu']} tp{job['tp']} pp{job['pp']} {job['precision']} {job['isl']}/{job['osl']}"
                  f" bs{job['batch']}: {tokens or status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

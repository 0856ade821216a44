#!/usr/bin/env python
"""Write pipeline/data/aiconfigurator_silicon_serving.tsv: TTFT and TPOT that NVIDIA measured on silicon for TensorRT-LLM
serving a model at a fixed concurrency, from the sample AIConfigurator ships beside its perf database
(systems/silicon_sample.csv). The PyTorch backend's fit reads their TPOT, at a tenth of the throughput rows'
weight (scripts/plan_vs_published.py); the --more table's no fit reads.

Run with AIConfigurator's own Python (it needs nothing from the pipeline):

    /path/to/aic-venv/bin/python scripts/silicon_serving_record.py [--more] [OUT.tsv]

--more writes pipeline/data/aiconfigurator_silicon_serving_more.tsv instead: the sample's grid of a model added after the
PyTorch backend's fit first read the table above (Llama 3.1 8B in BF16 on H100, TensorRT-LLM 1.0.0rc3), which no fit
reads; each row also names its KV cache, as TensorRT-LLM defaults it for that checkpoint (the model's own 16 bits). The
sample's Qwen3 235B A22B grid on H100 runs its experts with expert parallelism under TP attention, which the planner does
not plan (it plans expert parallelism with attention data parallelism only), so it is left out.

Beside each measurement it records AIConfigurator's own estimate of the same row (aiconfigurator.cli.api.cli_estimate,
what `aiconfigurator cli estimate --estimate-mode agg` runs; `aiconfigurator_command` is that command line), with what
the sample does not say taken as the planner takes it: an FP8 KV cache and TensorRT-LLM's default KV-cache memory fraction
0.9. The model folder holds config.json from pipeline/data/published_models/<model>.json (keys starting with `_` dropped).

Kept: the TensorRT-LLM rows of aggregated serving (prefill and decode on the same GPUs), without pipeline stages or
attention data parallelism, of the models the planner has a config for in pipeline/data/published_models/ (MODELS), on
our GPUs (SYSTEMS). Each row: the sample's id, the date it was measured (where its source names one) and TensorRT-LLM
release (where it names one), its ISL/OSL, TP, concurrency (the sample's batch_size, which its source also names as
silicon_concurrency), and the mean TTFT and TPOT in ms.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from allreduce_record import ADDED_SYSTEMS, SYSTEMS, write_table  # noqa: E402

MODELS = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b", "Qwen/Qwen3-32B": "qwen3-32b"}  # model_path -> published_models key
# --more: added after the PyTorch fit read the table of MODELS; model_path -> (published_models key, its KV cache)
MORE_MODELS = {"meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", "bfloat16")}
PRECISIONS = {"fp8": "FP8", "fp4": "FP4", "bf16": "BF16", "fp16": "FP16", "": "BF16"}  # none named: an unquantized checkpoint
SAMPLE = "systems/silicon_sample.csv"
GEMM_QUANT = {"FP8": "fp8", "FP4": "nvfp4", "BF16": "bfloat16", "FP16": "float16"}
KV_QUANT, KV_FRACTION = "fp8", 0.9
COLUMNS = ("model", "gpu", "precision", "isl", "osl", "tp", "concurrency", "ttft_ms", "tpot_ms", "measured", "trtllm_version",
           "sample_id", "hf_model", "system", "aiconfigurator_ttft_ms", "aiconfigurator_tpot_ms", "aiconfigurator_status",
           "aiconfigurator_version", "database_version", "source", "aiconfigurator_command")
MORE_COLUMNS = (*COLUMNS[:3], "kv_cache", *COLUMNS[3:])


def rows(more: bool = False) -> list[dict[str, str]]:
    import aiconfigurator_core
    import pandas as pd

    path = Path(aiconfigurator_core.__file__).parent / SAMPLE
    frame = pd.read_csv(path)
    gpus = {system: gpu for gpu, system in (SYSTEMS | ADDED_SYSTEMS).items()}
    models = MORE_MODELS if more else MODELS
    kept = frame[(frame["backend"] == "trtllm") & (frame["mode"] == "agg") & frame["model_path"].isin(models)
                 & frame["system"].isin(gpus) & (frame["pp_size"] == 1) & (frame["attention_dp_size"].fillna(1) == 1)]
    if more:  # the 1.0.0rc3 grid
        kept = kept[kept["backend_version"] == "1.0.0rc3"]
    kept = kept.assign(precision=kept["precision"].fillna(""), release=kept["backend_version"].fillna(""))
    version = metadata.version("aiconfigurator")
    out = []
    for record in kept.sort_values(["model_path", "system", "precision", "isl", "osl", "tp_size", "batch_size"]).itertuples():
        measured = re.search(r"measured=([0-9-]+)", record.silicon_data_source)
        model = models[record.model_path]
        extra = {"kv_cache": model[1]} if more else {}
        out.append({
            **extra, "model": model[0] if more else model, "gpu": gpus[record.system], "precision": PRECISIONS[record.precision],
            "isl": str(record.isl), "osl": str(record.osl), "tp": str(int(record.tp_size)),
            "concurrency": str(int(record.batch_size)), "ttft_ms": f"{record.silicon_ttft_ms:.3f}",
            "tpot_ms": f"{record.silicon_tpot_ms:.3f}", "measured": measured[1] if measured else "", "trtllm_version": record.release,
            "sample_id": record.id, "hf_model": record.model_path, "system": record.system,
            "aiconfigurator_version": version, "source": SAMPLE,
        })
    return out


def _model_dir(model: str, root: Path) -> Path:
    folder = root / model
    if not folder.is_dir():
        config = json.loads((Path(__file__).resolve().parents[1] / "pipeline" / "data" / "published_models"
                             / f"{model}.json").read_text(encoding="utf-8"))
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if not k.startswith("_")}))
    return folder


def with_estimate(row: dict[str, str], root: Path) -> dict[str, str]:
    """The row with AIConfigurator's TTFT and TPOT for it (status: ok, or why there is none)."""
    from aiconfigurator.cli.api import cli_estimate

    gemm, kv = GEMM_QUANT[row["precision"]], row.get("kv_cache", KV_QUANT)
    asked = dict(model_path=str(_model_dir(row["model"], root)), system_name=row["system"], mode="agg",
                 backend_name="trtllm", isl=int(row["isl"]), osl=int(row["osl"]), batch_size=int(row["concurrency"]),
                 tp_size=int(row["tp"]), gemm_quant_mode=gemm, kvcache_quant_mode=kv, free_gpu_memory_fraction=KV_FRACTION)
    command = (f"aiconfigurator cli estimate --model-path {row['model']} --system {row['system']} --backend trtllm "
               f"--estimate-mode agg --isl {row['isl']} --osl {row['osl']} --batch-size {row['concurrency']} "
               f"--tp-size {row['tp']} --gemm-quant-mode {gemm} --kvcache-quant-mode {kv} "
               f"--free-gpu-memory-fraction {KV_FRACTION}")
    try:
        result = cli_estimate(**asked)
        figures = {"aiconfigurator_ttft_ms": f"{float(result.ttft):.3f}", "aiconfigurator_tpot_ms": f"{float(result.tpot):.3f}",
                   "aiconfigurator_status": "ok", "database_version": str(result.backend_version)}
    except Exception as exc:  # noqa: BLE001 - recorded, not hidden: the row says why it has no figure
        message = str(exc).replace(asked["model_path"], row["model"])  # the temporary folder's name says nothing
        figures = {"aiconfigurator_ttft_ms": "", "aiconfigurator_tpot_ms": "", "database_version": "",
                   "aiconfigurator_status": f"error: {type(exc).__name__}: {message[:120]}".replace("\t", " ").replace("\n", " ")}
    print(f"{row['gpu']} {row['precision']} {row['isl']}/{row['osl']} tp{row['tp']} c{row['concurrency']}: "
          f"{figures['aiconfigurator_tpot_ms'] or figures['aiconfigurator_status']}", flush=True)
    return {**row, **figures, "aiconfigurator_command": command}


def main() -> None:
    more = "--more" in sys.argv
    if more:
        sys.argv.remove("--more")
    with tempfile.TemporaryDirectory() as root:
        table = [with_estimate(row, Path(root)) for row in rows(more)]
    if more:
        write_table("aiconfigurator_silicon_serving_more.tsv",
                    "TensorRT-LLM serving measured on silicon at a fixed concurrency, as aiconfigurator_silicon_serving.tsv, of the\n"
                    "model added after the PyTorch backend's fit first read that table (no fit reads this one): Llama 3.1 8B Instruct\n"
                    "on H100, TensorRT-LLM 1.0.0rc3 (the sample names no quantization: the unquantized checkpoint, BF16). kv_cache:\n"
                    "the checkpoint's own 16 bits, TensorRT-LLM's default where the checkpoint quantizes no KV cache. AIConfigurator\n"
                    "asked with the same.\n"
                    "Written by scripts/silicon_serving_record.py --more; read by scripts/plan_vs_silicon_serving.py.",
                    MORE_COLUMNS, table)
        return
    write_table("aiconfigurator_silicon_serving.tsv",
                "TensorRT-LLM serving measured on silicon at a fixed concurrency: mean TTFT and TPOT (ms), from the sample NVIDIA\n"
                "ships in AIConfigurator (PyPI aiconfigurator; `source` is the file inside its package, `sample_id` its row).\n"
                "Aggregated serving (the sample's mode agg), no pipeline stages, no attention data parallelism; concurrency is the\n"
                "sample's batch_size (its silicon_concurrency); trtllm_version the sample's backend_version (empty: it names none).\n"
                "Beside each: AIConfigurator's own estimate (aiconfigurator_command), with an FP8 KV cache at memory fraction 0.9.\n"
                "Written by scripts/silicon_serving_record.py; read by scripts/plan_vs_silicon_serving.py and, their TPOT, by the\n"
                "PyTorch backend's fit (at a tenth of the throughput rows' weight: scripts/plan_vs_published.py).",
                COLUMNS, table)


if __name__ == "__main__":
    main()

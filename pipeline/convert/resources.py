"""The convert stage's resource pre-checks: memory (where the model goes, pipeline.placement) and
disk, from config.json alone, before anything loads; for an hf: source not downloaded yet, before
the weights are downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from pipeline.core import resources
from pipeline.core.artifacts import read_manifest
from pipeline.quantization.calibration import CalibrationSet
from pipeline.convert.spec import ConvertDecisions, ConvertSpec
from pipeline.hf.hub import hub_cache_dir, hub_offline
from pipeline.hf.sources import parse_source
from pipeline.core.paths import stage_dir
from pipeline.placement import Job, Placement, model_shape, place
from pipeline.core.quant import KvCacheFormat, QuantFormat


def convert_job(spec: ConvertSpec, fmt: QuantFormat, kv: KvCacheFormat, dtype: str, calibration: Optional[CalibrationSet]) -> Job:
    """The convert job the memory pre-check sizes (calibration samples x calib_max_len tokens)."""
    quantized = fmt.modelopt_config is not None or kv.kv_cache_quant_algo is not None
    return Job(kind="convert", load_dtype=dtype, quant=fmt.name, quantized=quantized, tp=spec.tp, pp=spec.pp,
               samples=calibration.size if calibration else 0, seq_len=spec.calib_max_len,
               batch_size=spec.calib_batch_size, passes=2 if "awq" in fmt.name else 1)


def check_resources(plan: ConvertDecisions, spec: ConvertSpec) -> Placement:
    """Where the model goes (pipeline.placement), refused with exit 2 when it fits nowhere; and room
    on disk for the checkpoint. Runs after the no-op check: an up-to-date checkpoint needs neither."""
    job = convert_job(spec, plan.fmt, plan.kv, plan.dtype, plan.calibration)
    shape = model_shape(plan.hf_dir)
    placement = place(shape, job, resources.machine(), spec.device, name=plan.model)
    resources.check_disk(plan.out, placement.footprint.checkpoint, what=f"the {plan.fmt.name} checkpoint of {plan.model}",
                         free=resources.free_disk_bytes(plan.out))
    return placement


def check_hub_model_fits(spec: ConvertSpec, job: Job) -> None:
    """For an hf: source not downloaded yet: fetch its config.json alone (into the HF cache) and run
    the memory pre-check before the weights are downloaded. Skipped when the Hub cannot be asked;
    the check after the download still runs before anything loads."""
    if Path(spec.model).expanduser().is_dir() or not spec.model.startswith("hf:"):
        return
    parsed = parse_source(spec.model)
    if (read_manifest(stage_dir(parsed.model, "hf", root=spec.root)) or {}).get("stage") == "download":
        return
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:  # the revision is resolved to a commit first, as the download itself will do
        folder = snapshot_download(parsed.location, revision=parsed.revision, cache_dir=hub_cache_dir(),
                                   allow_patterns=["config.json"], local_files_only=hub_offline(),
                                   endpoint=os.environ.get("HF_ENDPOINT") or None)
    except (HfHubHTTPError, OSError, ValueError):
        return
    config = Path(folder) / "config.json"
    if not config.is_file():
        return
    place(model_shape(config), job, resources.machine(), spec.device, name=parsed.display)

"""`pipeline build --backend pytorch --speculative ...`: the LLM-API `speculative_config` and the draft folder of a
PyTorch-backend deployable (rules and facts in pipeline.build.speculative).

The deployable holds the draft's HF files at <deployable>/draft/ (links, as model/ is), and the options name it by
its absolute path there; render and the Kubernetes manifests move that path under the bundle's root, as they do
every path inside the deployable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.build.draft import check_fits_with_draft, draft_memory, hf_draft, with_draft
from pipeline.build.memory import EngineTarget, Limits, MemoryEstimate
from pipeline.build.shared import model_folder_name
from pipeline.build.speculative import (DRAFT_SUBDIR, SpeculativeSpec, check_same_vocabulary, decide, greedy_warning,
                                        torch_config, torch_extra_options)


class TorchSpeculation(BaseModel):
    model_config = ConfigDict(frozen=True)

    record: dict[str, Any]
    label: str
    config: dict[str, Any]  # speculative_config without speculative_model_dir (added once the folder is known)
    extra: dict[str, Any]
    why: dict[str, str]
    memory: MemoryEstimate
    draft_source: Path | None = None
    notes: list[str] = []

    def options(self, options: dict[str, Any], deploy_dir: Path) -> dict[str, Any]:
        """The deployable's options with speculation (speculative_model_dir: <deployable>/draft)."""
        config = dict(self.config)
        if self.draft_source is not None:
            config["speculative_model_dir"] = str(Path(deploy_dir).resolve() / DRAFT_SUBDIR)
        return {**options, **self.extra, "speculative_config": config}


def _samples_by_default(model_dir: Path) -> bool:
    """Whether the model's generation_config.json makes sampling the default (do_sample, or a temperature set)."""
    path = Path(model_dir) / "generation_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return False
    return bool(config.get("do_sample")) or config.get("temperature") not in (None, 0, 1, 1.0)


def plan_torch_speculation(spec: SpeculativeSpec, target_dir: Path, target: EngineTarget, limits: Limits,
                           memory: MemoryEstimate) -> TorchSpeculation:
    """Check the method for the PyTorch backend, find and check the draft, count its memory."""
    speculation = decide(spec, backend="pytorch", pp=target.pp, cpu=target.gpu.is_cpu)
    notes: list[str] = []
    draft = hf_draft(str(spec.draft)) if spec.draft else None
    if draft is not None:
        check_same_vocabulary(target_dir, draft, speculation.method)
        draft_estimate = draft_memory(draft, target, limits)
        if draft_estimate is None:
            notes.append(f"draft: {draft}'s config is not a model this planner reads (an EAGLE-3 head): its memory is not counted")
        else:
            memory = with_draft(memory, draft_estimate, limits)
            check_fits_with_draft(str(target_dir.name), memory)
    warning = greedy_warning(speculation, _samples_by_default(target_dir))
    if speculation.method == "eagle3":
        notes.append(warning or "EAGLE-3 in TensorRT-LLM 1.1 serves greedy only: a request's temperature/top_p/top_k are "
                     "ignored (no-ops)")
    extra, why = torch_extra_options(speculation)
    why["speculative_config"] = f"{speculation.method} speculation, max_draft_len {speculation.max_draft_len}" + (
        f", draft {DRAFT_SUBDIR}/ (from {draft})" if draft else "")
    record = speculation.record()
    if draft is not None:
        record["draft_dir"] = DRAFT_SUBDIR
    return TorchSpeculation(record=record, label=speculation.label(model_folder_name(spec.draft) if spec.draft else None, draft),
                            config=torch_config(speculation, None), extra=extra, why=why, memory=memory,
                            draft_source=draft, notes=notes)

"""Rendering for an engine built with speculative decoding (issue #24's "speculative" record).

The record is read from the engine folder's config.json (build_config["speculative"], reference folders)
or its manifest.json ("speculative", any build). What it changes in the repository, as NVIDIA lays it out:
- draft-target: a `tensorrt_llm_draft` model, the `tensorrt_llm` template again with the draft engine
  (<engine>/<draft_dir>, carried inside the bundle under tensorrt_llm/1/) as its gpt_model_path, and the
  BLS's `tensorrt_llm_draft_model_name` naming it (tensorrtllm_backend @c2e65b88
  all_models/inflight_batcher_llm/tensorrt_llm_bls/config.pbtxt: tensorrt_llm_draft_model_name; BK-rel
  docs/model_config.md:221-228: copy tensorrt_llm to tensorrt_llm_draft and rename it);
- lookahead (engine path): `decoding_mode` lookahead and the three lookahead_* parameters, mandatory with it
  (tensorrtllm_backend @c2e65b88 inflight_batcher_llm/src/model_instance_state.cc:627-646; config.pbtxt
  L769-793; docs/model_config.md:160).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.build.speculative import recorded_speculation
from pipeline.core.errors import InvalidInputError

DRAFT_MODEL = "tensorrt_llm_draft"


def speculative_record(engine: Path, config: dict) -> dict | None:
    """The engine's speculation record (build.speculative.recorded_speculation), None without one."""
    return recorded_speculation(Path(engine), config) or None


def draft_engine(engine: Path, record: dict | None) -> Path | None:
    """The draft engine folder of a draft-target build (checked), else None."""
    if not record or record.get("method") != "draft-target":
        return None
    relative = str(record.get("draft_dir") or "draft")
    folder = (Path(engine) / relative).resolve()
    if Path(relative).is_absolute() or Path(engine).resolve() not in folder.parents:
        raise InvalidInputError(f"The speculative record's draft_dir {relative!r} is not a folder inside {engine}.",
                                hint="Build the target with its draft: the draft engine goes to <engine>/draft/.")
    if not (folder / "config.json").is_file():
        raise InvalidInputError(f"The draft engine {folder} has no config.json.",
                                hint="Rebuild the target with --speculative draft-target --draft SOURCE.")
    return folder


def lookahead_parameters(record: dict | None) -> dict[str, str]:
    """decoding_mode and the lookahead_* parameters of a lookahead engine; {} otherwise."""
    if not record or record.get("method") != "lookahead":
        return {}
    window, ngram, verification = (int(v) for v in record.get("lookahead") or (0, 0, 0))
    if min(window, ngram, verification) < 1:
        raise InvalidInputError(f"The lookahead record {record.get('lookahead')} needs three values >= 1 (W, N, G).",
                                hint="Rebuild with --speculative lookahead --lookahead W,N,G, e.g. 7,7,7.")
    return {"decoding_mode": "lookahead", "lookahead_window_size": str(window), "lookahead_ngram_size": str(ngram),
            "lookahead_verification_set_size": str(verification)}


def draft_context(context: dict, draft: Path, draft_path: Path) -> dict:
    """The template values of the tensorrt_llm_draft model: the target's, with the draft engine's path and batch."""
    config = json.loads((draft / "config.json").read_text(encoding="utf-8"))
    build = config.get("build_config") or {}
    parameters = {k: v for k, v in context["tensorrt_llm_parameters"].items()
                  if k not in ("decoding_mode",) and not k.startswith("lookahead_")}
    parameters["gpt_model_path"] = str(draft_path)
    return {**context, "model_name": DRAFT_MODEL, "tensorrt_llm_parameters": parameters,
            "triton_max_batch_size": int(build.get("max_batch_size") or context["triton_max_batch_size"])}

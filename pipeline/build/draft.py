"""The draft model of a speculative build: where its input is, and the memory it takes beside the target.

The draft is found like the target: an HF folder (the reference runtime and the PyTorch backend load HF weights)
or a TensorRT-LLM checkpoint (trtllm-build), given as a folder or as a model name under build/ (`pipeline download`
and `pipeline convert` write them; `make engine DRAFT=...` runs both). Its memory counts on every GPU that holds the
target: its weights, and its own KV cache for the same sequences (a draft engine keeps a cache per request too).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.build.flags import Flag
from pipeline.build.speculative import DRAFT_SUBDIR, SpeculativeSpec, check_same_vocabulary, decide, engine_flags
from pipeline.build.checkpoint import checkpoint_format, find_checkpoint, read_checkpoint
from pipeline.build.memory import GIB, EngineTarget, Limits, MemoryEstimate, estimate
from pipeline.build.shared import model_folder_name
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.paths import stage_dir


def hf_draft(source: str) -> Path:
    """The draft's HF folder: a folder given as is, else build/<model>/hf of a downloaded model."""
    path = Path(source).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    folder = stage_dir(model_folder_name(source), "hf")
    if (folder / "config.json").is_file():
        return folder
    raise InvalidInputError(f"No draft model at {source!r}: not a folder with config.json, and no {folder}.",
                            hint=f"Download it first: `pipeline download {source}` (or `make engine ... DRAFT={source}`, "
                            "which downloads and converts it), or pass the draft's folder.")


def engine_draft(source: str, target: EngineTarget) -> tuple[Path, list[str]]:
    """The draft's TensorRT-LLM checkpoint for trtllm-build: a checkpoint folder, or the converted checkpoint of a
    model under build/ in the target's precision and tp. Not converted yet: a placeholder path, and a note."""
    path = Path(source).expanduser()
    if (path / "config.json").is_file():
        if checkpoint_format(path) != "hf":
            return path.resolve(), []
        return path.resolve(), [f"draft: {path} is a Hugging Face folder, which can be planned; trtllm-build needs it "
                                f"converted: `pipeline convert --checkpoint {path} --quant {target.quant.name} --tp {target.tp}`"]
    model = model_folder_name(source)
    try:
        return find_checkpoint(model, quant=target.quant.name, kv_cache=target.kv.name, tp=target.tp, pp=1), []
    except InvalidInputError:
        placeholder = stage_dir(model, "checkpoints") / "<checkpoint-id>"
        return placeholder, [f"draft: no {target.quant.name} checkpoint of {model} (tp {target.tp}) yet; run `pipeline convert "
                             f"--model {model} --quant {target.quant.name} --tp {target.tp}` before building"]


def draft_memory(draft: Path, target: EngineTarget, limits: Limits) -> MemoryEstimate | None:
    """The draft's own estimate in the target's precision and tp (None when its config cannot be read: an
    EAGLE-3 head's architecture, or a checkpoint not converted yet)."""
    try:
        info = read_checkpoint(draft)
    except (InvalidInputError, UnsupportedError, KeyError, ValueError, OSError):
        return None
    return estimate(EngineTarget(info.shape, target.gpu, target.quant, target.kv, target.tp, 1, target.goal), limits)


def with_draft(memory: MemoryEstimate, draft: MemoryEstimate, limits: Limits) -> MemoryEstimate:
    """Target and draft on the same GPUs: both weights, and every token's KV in both caches."""
    kv_per_token = memory.kv_bytes_per_token + draft.kv_bytes_per_token
    free_kv = memory.kv_capacity_tokens * memory.kv_bytes_per_token - draft.weights_gib * GIB
    capacity = max(0, math.floor(free_kv / kv_per_token)) if kv_per_token else 0
    one_sequence = kv_per_token * limits.max_seq_len / GIB
    needed = memory.needed_gib + draft.weights_gib + draft.kv_one_sequence_gib
    fits = memory.fits and needed <= memory.gpu_memory_gib and capacity >= limits.max_seq_len
    sequences = capacity // limits.max_seq_len
    return memory.model_copy(update={
        "weights_gib": round(memory.weights_gib + draft.weights_gib, 3), "kv_bytes_per_token": kv_per_token,
        "kv_one_sequence_gib": round(one_sequence, 4), "needed_gib": round(needed, 3), "kv_capacity_tokens": capacity,
        "max_full_sequences": sequences, "fits": fits, "low_memory": fits and sequences < 4 <= memory.max_full_sequences,
    })


def check_fits_with_draft(name: str, memory: MemoryEstimate) -> None:
    if not memory.fits:
        raise UnsupportedError(
            f"{name} with its draft model does not fit on {memory.gpu}: target and draft need ~{memory.needed_gib:.1f} GiB "
            f"per GPU (weights {memory.weights_gib:.1f}) of {memory.gpu_memory_gib:.1f} GiB, leaving KV room for "
            f"{memory.kv_capacity_tokens} tokens.",
            hint="Use a smaller draft, a larger --tp, shorter --max-seq-len, or a draft-free method (ngram / lookahead).")


class EngineSpeculation(BaseModel):
    """What --speculative adds to an engine-layout plan (GPU or reference runtime): the record, the target's flags,
    the draft's input and build flags, the memory with the draft."""

    model_config = ConfigDict(frozen=True)

    record: dict[str, Any]
    label: str
    flags: list[Flag]
    memory: MemoryEstimate
    draft_checkpoint: Path | None = None
    draft_flags: list[Flag] = []
    notes: list[str] = []

    def identity(self) -> dict[str, Any]:
        """What the build's inputs hash adds: the record, the draft (its folder and recorded revision), its flags."""
        from pipeline.core.artifacts import read_manifest

        draft = None
        if self.draft_checkpoint is not None:
            manifest = read_manifest(self.draft_checkpoint) or {}
            draft = {"path": str(self.draft_checkpoint), "inputs": manifest.get("inputs_hash")}
        return {"record": self.record, "draft": draft, "draft_flags": [f.argv() for f in self.draft_flags]}

    def command(self, engine_dir: Path) -> list[str]:
        """The draft engine's trtllm-build (into <engine>/draft), or [] without a draft."""
        from pipeline.build.flags import trtllm_build_command

        if self.draft_checkpoint is None:
            return []
        return trtllm_build_command(self.draft_checkpoint, engine_dir / DRAFT_SUBDIR, self.draft_flags)


class EnginePlanInputs(BaseModel):
    """The parts of an engine plan speculation builds on."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    checkpoint: Path  # the target's input (HF folder for the CPU)
    target: EngineTarget
    limits: Limits
    flags: list[Flag]
    memory: MemoryEstimate
    tokens_per_block: int | None = None
    gemm_plugin: str | None = None


def _paged_context(flags: list[Flag], what: str) -> list[Flag]:
    """Draft-target needs paged context FMHA on both engines (KV-cache reuse; fact 1.4)."""
    found = next((f for f in flags if f.name == "--use_paged_context_fmha"), None)
    if found is not None and found.value != "enable":
        raise UnsupportedError(f"Draft-target speculation needs --use_paged_context_fmha enable on the {what}, and this "
                               f"precision turns it off ({found.why}).",
                               hint="Use a 16-bit KV cache (drop --kv-cache), FP8 weights with an FP8 KV cache, or "
                               "--speculative lookahead.")
    return [f if f.name != "--use_paged_context_fmha" else
            Flag(name=f.name, value="enable", why="draft-target: both engines need KV-cache reuse (NVIDIA's DTM README)")
            for f in flags]


def plan_speculation(spec: SpeculativeSpec, plan: EnginePlanInputs) -> EngineSpeculation:
    """The engine-layout side of --speculative: for a GPU the target's trtllm-build flags and the draft engine's
    build; for the CPU the draft's HF folder. Both count the draft's memory (see pipeline.build.speculative)."""
    from pipeline.build.flags import trtllm_flags

    cpu = plan.target.gpu.is_cpu
    speculation = decide(spec, backend="tensorrt", pp=plan.target.pp, cpu=cpu)
    flags = list(plan.flags)
    notes: list[str] = []
    draft_ckpt, draft_flags, memory, draft_name = None, [], plan.memory, None
    if speculation.method == "draft-target":
        draft_name = model_folder_name(str(spec.draft))
        if cpu:
            draft_ckpt = hf_draft(str(spec.draft))
        else:
            flags = _paged_context(flags, "target")
            draft_ckpt, notes = engine_draft(str(spec.draft), plan.target)
        draft = draft_memory(draft_ckpt, plan.target, plan.limits)
        if draft is None:
            notes.append("draft: its memory is not counted until its checkpoint exists")
        else:
            check_same_vocabulary(plan.checkpoint, draft_ckpt, speculation.method)
            memory = with_draft(memory, draft, plan.limits)
            check_fits_with_draft(plan.name, memory)
            if not cpu:
                shape = read_checkpoint(draft_ckpt).shape
                draft_target = EngineTarget(shape, plan.target.gpu, plan.target.quant, plan.target.kv, plan.target.tp, 1,
                                            plan.target.goal)
                draft_flags = _paged_context(trtllm_flags(draft_target, plan.limits, tokens_per_block=plan.tokens_per_block,
                                                          gemm_plugin=plan.gemm_plugin), "draft")
        if not cpu and not draft_flags:
            draft_flags = [f for f in flags if f.name != "--workers"] + [
                Flag(name="--workers", value=str(plan.target.tp), why="the draft's rank engine(s)")]
    if not cpu:
        flags.extend(Flag(name=name, value=value, why=why) for name, value, why in engine_flags(speculation))
    return EngineSpeculation(record=speculation.record(), label=speculation.label(draft_name, draft_ckpt), flags=flags, memory=memory,
                             draft_checkpoint=draft_ckpt, draft_flags=draft_flags, notes=notes)


def build_draft_engine(plan: Any, engine_tmp: Path, executable: str) -> None:
    """Run the draft's trtllm-build into <engine>/draft (plan: the target's BuildPlan); its log stays beside it."""
    from pipeline.build.runner import run_logged
    from pipeline.core.errors import StageFailedError
    from pipeline.core.tool_env import nvidia_environment

    out = engine_tmp / DRAFT_SUBDIR
    if plan.draft is None or not (plan.draft / "config.json").is_file() or checkpoint_format(plan.draft) == "hf":
        raise InvalidInputError(f"The draft {plan.draft} is not a TensorRT-LLM checkpoint, which trtllm-build needs.",
                                hint="Convert it in the target's precision and tp (`pipeline convert --model DRAFT --quant ...`) "
                                "and pass that checkpoint as --draft, or use `make engine ... DRAFT=...`.")
    argv = [executable, *plan.draft_command[1:]]
    argv[argv.index("--output_dir") + 1] = str(out)
    log_path = engine_tmp / f"{DRAFT_SUBDIR}.build.log"
    result = run_logged(argv, log_path, env=nvidia_environment())
    if result.returncode != 0 or not (out / "config.json").is_file():
        raise StageFailedError(f"The draft's trtllm-build exited with code {result.returncode}. Last lines of {log_path}:\n"
                               f"{result.log_tail(25)}",
                               hint="Fix the cause in the log (the draft must be a checkpoint of the target's precision "
                               "and tp) and build again.")
    shutil.move(str(log_path), out / "build.log")

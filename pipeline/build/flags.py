"""The exact `trtllm-build` command for a GPU, a checkpoint's precision and a workload goal.

Every flag emitted here exists in the pinned release's flag table (checked by a contract test over
every GPU x precision x goal against shared/reference/trtllm_build_flags.tsv). Choices, with the
TensorRT-LLM rule each one follows (docs/source/performance/perf-best-practices.md and the
builder's own checks in tensorrt_llm/builder.py):

- KV cache: `--kv_cache_type paged` (the non-deprecated spelling of --paged_kv_cache enable); paged
  KV cache, remove_input_padding and the GPT attention plugin are what in-flight batching needs.
- `--use_paged_context_fmha enable`: needed for KV-cache reuse and chunked context. The builder turns
  it off with an INT8 KV cache, and with an FP8 KV cache unless FP8 context FMHA runs, so we say
  `disable` in those cases instead of emitting a flag that would be silently overridden.
- `--use_fp8_context_fmha`: only for FP8-activation checkpoints (quant_algo FP8, W4A8_AWQ, NVFP4)
  on SM >= 8.9 *with an FP8 KV cache* (with paged context FMHA the builder requires both); the table
  default is `enable`, so every other case says `disable` explicitly.
- `--gemm_plugin`: `auto` (= the model dtype, cuBLASLt) for 16-bit, weight-only and SmoothQuant
  checkpoints (recommended for FP16/BF16: faster, less memory); for FP8 `disable` (NVIDIA recommends
  TensorRT's own FP8 GEMMs) except the latency goal at batch <= 4 on SM 8.9/9.0, where the FP8 GEMM
  plugin is the documented small-batch optimisation; `nvfp4` for NVFP4 (what the builder picks
  anyway unless told `disable`).
- `--multiple_profiles enable` for throughput (more TensorRT optimisation profiles over the token
  range; helps most when the GEMM plugin is off), `disable` for latency (faster builds).
- `--tokens_per_block` 32 for latency (finer KV-reuse granularity), 64 for throughput (fewer blocks
  to manage at large batch).
- `--workers` = tp x pp, so every rank's engine builds in parallel where the GPUs exist.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pipeline.build.memory import EngineTarget, Limits
from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import GpuSpec
from pipeline.planner import Goal
from pipeline.core.quant import KvCacheFormat, QuantFormat

FP8_ACTIVATION_ALGOS = {"FP8", "W4A8_AWQ", "NVFP4"}
FP8_GEMM_PLUGIN_MAX_BATCH = 4
GEMM_PLUGIN_CHOICES = ("auto", "float16", "bfloat16", "fp8", "nvfp4", "disable")


class Flag(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    value: str | None = None  # None: a store_true flag
    why: str = ""
    extra: tuple[str, ...] = ()  # the further values of an nargs="+" flag (--lora_dir A B)

    def argv(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value, *self.extra]


def builder_restriction(gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat) -> str | None:
    """What the TensorRT-LLM builder itself refuses on this GPU (beyond the compute-capability table)."""
    sm = gpu.sm
    if sm is not None and 100 <= sm < 120:
        int_weights = quant.name in {"int8_sq", "int8_wo", "int4_wo", "int4_awq", "w4a8_awq"}
        if int_weights or kv.name == "int8":
            what = f"{quant.name} weights" if int_weights else "an INT8 KV cache"
            return (f"TensorRT-LLM refuses {what} on SM {gpu.compute_capability} ({gpu.key}): INT8/INT4 weight-only, "
                    "SmoothQuant and INT8 KV cache are not supported on SM >= 10.0")
    return None


def check_buildable(gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat) -> None:
    from pipeline.core.gpus import check_precision

    check_precision(gpu, quant, kv)
    reason = builder_restriction(gpu, quant, kv)
    if reason:
        raise UnsupportedError(reason + ".", hint=f"On {gpu.key} use fp8 or nvfp4 weights with an fp8 KV cache.")


def _gemm_plugin(gpu: GpuSpec, quant: QuantFormat, goal: Goal, limits: Limits) -> tuple[str, str]:
    if quant.name == "nvfp4":
        return "nvfp4", "NVFP4 GEMMs run in the NVFP4 GEMM plugin (the builder's own default for NVFP4)"
    if quant.name == "fp8":
        if goal == "latency" and limits.max_batch_size <= FP8_GEMM_PLUGIN_MAX_BATCH and gpu.sm in (89, 90):
            return "fp8", f"FP8 GEMM plugin: the documented small-batch (<= {FP8_GEMM_PLUGIN_MAX_BATCH}) latency optimisation"
        return "disable", "FP8: TensorRT's own FP8 GEMM kernels (NVIDIA recommends the GEMM plugin off for FP8)"
    return "auto", "cuBLASLt GEMM plugin in the model dtype: recommended for 16-bit GEMMs (faster, less memory)"


def trtllm_flags(
    target: EngineTarget,
    limits: Limits,
    *,
    tokens_per_block: int | None = None,
    gemm_plugin: str | None = None,
) -> list[Flag]:
    """The build flags (without --checkpoint_dir/--output_dir) for the engine `target` names (GPU, precision,
    tp x pp, goal), each with the reason it is there."""
    gpu, quant, kv, tp, pp, goal = target.gpu, target.quant, target.kv, target.tp, target.pp, target.goal
    check_buildable(gpu, quant, kv)
    if tokens_per_block is not None and (tokens_per_block < 1 or tokens_per_block & (tokens_per_block - 1)):
        raise UnsupportedError(f"--tokens-per-block {tokens_per_block} is not a power of two.",
                               hint="Use 16, 32, 64 or 128.")
    if gemm_plugin is not None and gemm_plugin not in GEMM_PLUGIN_CHOICES:
        raise UnsupportedError(f"--gemm-plugin {gemm_plugin!r} is not a choice.",
                               hint=f"Use one of: {', '.join(GEMM_PLUGIN_CHOICES)}.")
    fp8_activations = (quant.quant_algo or "") in FP8_ACTIVATION_ALGOS and gpu.cc >= 8.9
    fp8_context = fp8_activations and kv.name == "fp8"
    if kv.name == "int8":
        paged_context, paged_why = "disable", "the builder disables paged context FMHA with an INT8 KV cache (no KV reuse / chunked context)"
    elif kv.name == "fp8" and not fp8_context:
        paged_context, paged_why = "disable", "an FP8 KV cache with 16-bit activations: FP8 paged context FMHA is unavailable"
    else:
        paged_context, paged_why = "enable", "needed for KV-cache reuse and chunked context"
    if gemm_plugin is None:
        gemm, gemm_why = _gemm_plugin(gpu, quant, goal, limits)
    else:
        gemm, gemm_why = gemm_plugin, "user override"
    block = tokens_per_block or (32 if goal == "latency" else 64)
    return [
        Flag(name="--max_input_len", value=str(limits.max_input_len), why="longest prompt"),
        Flag(name="--max_seq_len", value=str(limits.max_seq_len), why="prompt + generated tokens"),
        Flag(name="--max_batch_size", value=str(limits.max_batch_size), why=f"{goal} goal"),
        Flag(name="--max_num_tokens", value=str(limits.max_num_tokens), why=f"{goal} goal: batched tokens per step"),
        Flag(name="--max_beam_width", value="1", why="greedy / sampling, no beam search"),
        Flag(name="--kv_cache_type", value="paged", why="paged KV cache for in-flight batching"),
        Flag(name="--tokens_per_block", value=str(block), why="paged KV block size"),
        Flag(name="--gpt_attention_plugin", value="auto", why="in-flight batching needs the attention plugin"),
        Flag(name="--remove_input_padding", value="enable", why="packed tokens: less compute and memory"),
        Flag(name="--context_fmha", value="enable", why="fused attention in the context phase"),
        Flag(name="--use_paged_context_fmha", value=paged_context, why=paged_why),
        Flag(name="--use_fp8_context_fmha", value="enable" if fp8_context else "disable",
             why="FP8 context FMHA: FP8 activations + FP8 KV cache on SM >= 8.9" if fp8_context
             else "FP8 context FMHA needs FP8 activations and an FP8 KV cache on SM >= 8.9"),
        Flag(name="--gemm_plugin", value=gemm, why=gemm_why),
        Flag(name="--multiple_profiles", value="enable" if goal == "throughput" else "disable",
             why="more optimisation profiles for varied batch shapes" if goal == "throughput" else "faster build; one shape range"),
        Flag(name="--logits_dtype", value="float32",
             why="stated, not inherited: ModelOpt checkpoints say float16, and render declares the engine's own "
             "logits dtype (the backend refuses logits requests when the two differ)"),
        Flag(name="--workers", value=str(tp * pp), why=f"build the {tp * pp} rank engine(s) in parallel"),
    ]


def trtllm_build_command(checkpoint_dir: Path, output_dir: Path, flags: list[Flag], executable: str = "trtllm-build") -> list[str]:
    argv = [executable, "--checkpoint_dir", str(checkpoint_dir), "--output_dir", str(output_dir)]
    for flag in flags:
        argv.extend(flag.argv())
    return argv


def command_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in argv)

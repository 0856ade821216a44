"""`pipeline build`: a TensorRT-LLM engine for a GPU (trtllm-build) or the reference runtime's engine for the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli._options import ForceOpt, GpuOpt, JsonOpt, KvCacheOpt, set_json
from pipeline.output import OUT

CheckpointOpt = Annotated[Optional[Path], typer.Option(
    "--checkpoint", help="TensorRT-LLM checkpoint folder (GPU) or HF folder (cpu, or a GPU --dry-run).")]
ModelNameOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Model name under build/ (finds its checkpoint, or its hf/ folder for --gpu cpu).")]
GoalOpt = Annotated[str, typer.Option("--goal", help="latency (small batch) or throughput (large batch, multiple profiles).")]
MaybeQuantOpt = Annotated[Optional[str], typer.Option(
    "--quant", help="Precision: read from a TensorRT-LLM checkpoint; needed to plan from an HF folder.")]
MaybeTpOpt = Annotated[Optional[int], typer.Option("--tp", min=1, help="Tensor-parallel size (a checkpoint fixes it).")]
MaybePpOpt = Annotated[Optional[int], typer.Option("--pp", min=1, help="Pipeline-parallel size (a checkpoint fixes it).")]
MaxInputOpt = Annotated[Optional[int], typer.Option("--max-input-len", min=1, help="Longest prompt (default 1024).")]
MaxSeqOpt = Annotated[Optional[int], typer.Option("--max-seq-len", min=2, help="Prompt + output tokens (default 2048).")]
MaxBatchOpt = Annotated[Optional[int], typer.Option("--max-batch-size", min=1, help="Default: 4 (latency) or from the KV capacity (throughput).")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-num-tokens", min=1, help="Batched tokens per step (default per goal).")]
BlockOpt = Annotated[Optional[int], typer.Option("--tokens-per-block", min=1, help="Paged KV block size (default 32 latency, 64 throughput).")]
GemmOpt = Annotated[Optional[str], typer.Option("--gemm-plugin", help="Override the GEMM plugin choice (auto, float16, bfloat16, fp8, nvfp4, disable).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan (command, profile, memory estimate); build nothing.")]


def register(app: typer.Typer) -> None:
    app.command("build")(build)


def build(
    gpu: GpuOpt,
    checkpoint: CheckpointOpt = None,
    model: ModelNameOpt = None,
    goal: GoalOpt = "throughput",
    quant: MaybeQuantOpt = None,
    kv_cache: KvCacheOpt = None,
    tp: MaybeTpOpt = None,
    pp: MaybePpOpt = None,
    max_input_len: MaxInputOpt = None,
    max_seq_len: MaxSeqOpt = None,
    max_batch_size: MaxBatchOpt = None,
    max_num_tokens: MaxTokensOpt = None,
    tokens_per_block: BlockOpt = None,
    gemm_plugin: GemmOpt = None,
    dry_run: DryRunOpt = False,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Build the engine for a GPU and goal into build/<model>/engines/<profile-id>/ (a no-op when it exists)."""
    from pipeline.build import BuildSpec, build_engine, plan_build
    from pipeline.errors import InvalidInputError

    set_json(json_output)
    if gpu == "auto":
        from pipeline.doctor import detect_gpu_key

        gpu = detect_gpu_key()
        OUT.info(f"--gpu auto: {gpu}")
    if goal not in ("latency", "throughput"):
        raise InvalidInputError(f"Unknown goal {goal!r}.", hint="Use --goal latency or --goal throughput.")
    spec = BuildSpec(
        gpu=gpu, checkpoint=checkpoint, model=model, goal=goal, quant=quant, kv_cache=kv_cache, tp=tp, pp=pp,
        max_input_len=max_input_len, max_seq_len=max_seq_len, max_batch_size=max_batch_size,
        max_num_tokens=max_num_tokens, tokens_per_block=tokens_per_block, gemm_plugin=gemm_plugin, force=force,
    )
    if dry_run:
        plan = plan_build(spec)
        OUT.result(plan, text=plan_text(plan))
        return
    result = build_engine(spec)
    for note in result.plan.notes:
        OUT.warn(note)
    verb = "up to date (cached)" if result.cached else "built"
    OUT.result(result, text=f"{result.plan.profile_name} ({result.plan.profile_id}) {verb} in {result.duration_s:.2f} s: "
               f"{result.engine_dir}")


def plan_text(plan) -> str:
    m, lim = plan.memory, plan.limits
    lines = [
        f"profile     {plan.profile_name}  (id {plan.profile_id}, runtime {plan.runtime})",
        f"gpu         {plan.gpu['key']}  SM {plan.gpu['compute_capability'] or '-'}  {plan.gpu['architecture']}",
        f"checkpoint  {plan.checkpoint}  ({plan.checkpoint_kind})",
        f"engine dir  {plan.engine_dir}",
        f"limits      max_input_len {lim.max_input_len}, max_seq_len {lim.max_seq_len}, "
        f"max_batch_size {lim.max_batch_size}, max_num_tokens {lim.max_num_tokens}",
        f"memory/GPU  weights {m.weights_gib:.2f} + activations {m.activation_gib:.2f} + runtime reserve {m.overhead_gib:.1f} "
        f"+ one sequence {m.kv_one_sequence_gib:.3f} = {m.needed_gib:.2f} of {m.gpu_memory_gib:.1f} GiB; "
        f"KV {m.kv_bytes_per_token} B/token, room for {m.kv_capacity_tokens} tokens = {m.max_full_sequences} "
        f"full sequences{' (LOW MEMORY)' if m.low_memory else ''}",
    ]
    if plan.command:
        parts = plan.command_line.split(" --")
        lines.append("command     " + " \\\n              --".join(parts))
        lines.append("why")
        lines.extend(f"  {f.name} {f.value or ''}: {f.why}" for f in plan.flags if f.why)
    for note in plan.notes:
        lines.append(f"note        {note}")
    return "\n".join(lines)

"""`pipeline build`: a TensorRT-LLM engine for a GPU (trtllm-build) or the reference runtime's engine for the CPU;
with `--backend pytorch`, a PyTorch-backend deployable (HF checkpoint + LLM-API options, no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from pipeline.cli._options import AttentionDpOpt, BackendOpt, ForceOpt, GoalOpt, GpuOpt, JsonOpt, KvCacheOpt, resolve_gpu, set_json
from pipeline.core.output import OUT
from pipeline.core.reporting import OutputReporter

CheckpointOpt = Annotated[Optional[Path], typer.Option(
    "--checkpoint", help="TensorRT-LLM checkpoint folder (GPU) or HF folder (cpu, or a GPU --dry-run); with --backend "
    "pytorch the HF checkpoint from `pipeline convert --format hf` (or the model's hf/ folder for 16-bit weights).")]
ModelNameOpt = Annotated[Optional[str], typer.Option(
    "--model", help="Model name under build/ (finds its checkpoint, or its hf/ folder for --gpu cpu).")]
MaybeQuantOpt = Annotated[Optional[str], typer.Option(
    "--quant", help="Precision: read from a TensorRT-LLM checkpoint; needed to plan from an HF folder.")]
MaybeTpOpt = Annotated[Optional[int], typer.Option("--tp", min=1, help="Tensor-parallel size (a checkpoint fixes it).")]
MaybePpOpt = Annotated[Optional[int], typer.Option("--pp", min=1, help="Pipeline-parallel size (a checkpoint fixes it).")]
MaxInputOpt = Annotated[Optional[int], typer.Option("--max-input-len", min=1, help="Longest prompt (default 1024).")]
MaxSeqOpt = Annotated[Optional[int], typer.Option("--max-seq-len", min=2, help="Prompt + output tokens (default 2048).")]
MaxBatchOpt = Annotated[Optional[int], typer.Option(
    "--max-batch-size", min=1, help="Default: the planner's for the goal (latency: the KV capacity up to 64; throughput: "
    "a little above the KV capacity; --gpu cpu: 4 or 16).")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-num-tokens", min=1, help="Batched tokens per step (default per goal).")]
BlockOpt = Annotated[Optional[int], typer.Option("--tokens-per-block", min=1, help="Paged KV block size (default 32 latency, 64 throughput).")]
GemmOpt = Annotated[Optional[str], typer.Option("--gemm-plugin", help="Override the GEMM plugin choice (auto, float16, bfloat16, fp8, nvfp4, disable).")]
BuildSloOpt = Annotated[Optional[str], typer.Option("--slo", help="Choose max_batch_size / max_num_tokens / KV fraction for SLOs (as `pipeline plan --slo`), with --isl/--osl.")]
SloIslOpt = Annotated[Optional[int], typer.Option("--isl", min=1, help="Prompt tokens the --slo choice is planned for.")]
SloOslOpt = Annotated[Optional[int], typer.Option("--osl", min=1, help="Output tokens the --slo choice is planned for.")]
BuildCalibrateOpt = Annotated[Optional[List[Path]], typer.Option("--calibrate", help="bench.json of this deployment (repeat): calibrate the --slo choice.")]
LoraOpt = Annotated[Optional[list[str]], typer.Option(
    "--lora", help="A PEFT adapter folder to serve, as PATH or NAME=PATH (digits: the task id; repeat per adapter). "
    "Its rank, hidden size, layers and modules are checked; the engine folder carries it in NVIDIA's format.")]
MaxLoraRankOpt = Annotated[Optional[int], typer.Option(
    "--max-lora-rank", min=1, help="Largest adapter rank the engine serves (default: the largest --lora rank).")]
LoraModulesOpt = Annotated[Optional[list[str]], typer.Option(
    "--lora-target-modules", help="NVIDIA module names LoRA applies to (default: every module the adapters target).")]
SpeculativeOpt = Annotated[Optional[str], typer.Option(
    "--speculative", help="Speculative decoding: draft-target (--draft), lookahead (engine), ngram or eagle3 (--backend pytorch).")]
DraftOpt = Annotated[Optional[str], typer.Option(
    "--draft", help="The draft model (draft-target: a smaller model with the target's tokenizer; eagle3: an EAGLE-3 head): "
    "a folder or a model downloaded under build/.")]
MaxDraftOpt = Annotated[Optional[int], typer.Option("--max-draft-len", help="Draft tokens verified per step (default 4; eagle3 3).")]
NgramOpt = Annotated[Optional[int], typer.Option("--max-matching-ngram-size", help="ngram: longest n-gram matched (default 2).")]
LookaheadOpt = Annotated[Optional[str], typer.Option("--lookahead", help="lookahead: W,N,G (default 4,4,4).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan (command, profile, memory estimate); build nothing.")]


def register(app: typer.Typer) -> None:
    app.command("build")(build)


def build(
    gpu: GpuOpt,
    backend: BackendOpt = "tensorrt",
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
    slo: BuildSloOpt = None,
    isl: SloIslOpt = None,
    osl: SloOslOpt = None,
    calibrate: BuildCalibrateOpt = None,
    lora: LoraOpt = None,
    max_lora_rank: MaxLoraRankOpt = None,
    lora_target_modules: LoraModulesOpt = None,
    speculative: SpeculativeOpt = None,
    draft: DraftOpt = None,
    max_draft_len: MaxDraftOpt = None,
    max_matching_ngram_size: NgramOpt = None,
    lookahead: LookaheadOpt = None,
    attention_dp: AttentionDpOpt = False,
    dry_run: DryRunOpt = False,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Build the engine (or, with --backend pytorch, the LLM-API deployable) for a GPU and goal into
    build/<model>/engines/<profile-id>/ (a no-op when it exists)."""
    from pipeline.build import BuildSpec, build_engine, plan_build
    from pipeline.build.speculative import speculative_spec

    set_json(json_output)
    spec = BuildSpec(
        gpu=resolve_gpu(gpu), checkpoint=checkpoint, model=model, goal=goal, quant=quant, kv_cache=kv_cache, tp=tp, pp=pp,
        max_input_len=max_input_len, max_seq_len=max_seq_len, max_batch_size=max_batch_size,
        max_num_tokens=max_num_tokens, tokens_per_block=tokens_per_block, gemm_plugin=gemm_plugin, force=force,
        backend=backend, slo=slo, slo_isl=isl, slo_osl=osl, calibrate=tuple(calibrate or ()),
        lora=tuple(lora or ()), max_lora_rank=max_lora_rank,
        lora_target_modules=tuple(lora_target_modules or ()),
        speculative=speculative_spec(speculative, draft, max_draft_len, max_matching_ngram_size, lookahead),
        attention_dp=attention_dp,
    )
    pytorch = backend == "pytorch"
    if dry_run:
        plan = plan_build(spec)
        OUT.result(plan, text=torch_plan_text(plan) if pytorch else plan_text(plan))
        return
    result = build_engine(spec, OutputReporter())
    for note in result.plan.notes:
        OUT.warn(note)
    verb = "up to date (cached)" if result.cached else "written" if pytorch else "built"
    OUT.result(result, text=f"{result.plan.profile_name} ({result.plan.profile_id}) {verb} in {result.duration_s:.2f} s: "
               f"{result.output_dir}")


def _memory_line(m) -> str:
    return (f"memory/GPU  weights {m.weights_gib:.2f} + activations {m.activation_gib:.2f} + runtime reserve "
            f"{m.overhead_gib:.1f}{f' + LoRA cache {m.lora_cache_gib:.3f}' if m.lora_cache_gib else ''} + one sequence {m.kv_one_sequence_gib:.3f} = {m.needed_gib:.2f} of {m.gpu_memory_gib:.1f} GiB; "
            f"KV {m.kv_bytes_per_token} B/token, room for {m.kv_capacity_tokens} tokens = {m.max_full_sequences} "
            f"full sequences{' (LOW MEMORY)' if m.low_memory else ''}")


def _lora_line(lora) -> str:
    adapters = ", ".join(f"{a.name} (task {a.task_id}, rank {a.rank})" for a in lora.adapters)
    return (f"lora        {adapters}; max rank {lora.shape.max_rank}, modules {' '.join(lora.shape.target_modules or ())}, "
            f"{lora.shape.dtype}; cache {lora.cache_bytes / (1 << 20):.1f} MiB")


def _slo_lines(plan) -> list[str]:
    """The SLO plan (`--slo`): what the limits were chosen for and what the planner predicts at its concurrency."""
    from pipeline.planner.slo import bounds_text

    record = plan.slo_plan
    if not record:
        return []
    predicted = ", ".join(f"{k} {record['prediction'][k]:.1f}" for k in record["slo"])
    return [f"slo         {bounds_text(record['slo'])} at ISL {record['isl']} / OSL "
            f"{record['osl']}: max_batch_size {record['max_batch_size']}, max_num_tokens {record['max_num_tokens']}, KV "
            f"fraction {record['kv_cache_free_gpu_mem_fraction']:g}; predicted at concurrency {record['concurrency']}: {predicted}"]


def torch_plan_text(plan) -> str:
    from pipeline.build.pytorch import options_yaml

    lines = [
        f"profile     {plan.profile_name}  (id {plan.profile_id}, backend pytorch, runtime {plan.runtime})",
        f"gpu         {plan.gpu['key']}  SM {plan.gpu['compute_capability'] or '-'}  {plan.gpu['architecture']}",
        f"checkpoint  {plan.checkpoint}  ({plan.checkpoint_format})",
        f"model/      links of {plan.model_source}",
        f"deployable  {plan.deploy_dir}",
        _memory_line(plan.memory),
        *_slo_lines(plan),
        "options     (llm_api_options.yaml)",
        *("  " + line for line in options_yaml(plan).splitlines() if not line.startswith("#")),
        "why",
        *(f"  {key}: {reason}" for key, reason in plan.why.items()),
    ]
    lines.extend(f"note        {note}" for note in plan.notes)
    if plan.plan_only:
        lines.append(f"plan only   {plan.plan_only}")
    return "\n".join(lines)


def plan_text(plan) -> str:
    m, lim = plan.memory, plan.limits
    lines = [
        f"profile     {plan.profile_name}  (id {plan.profile_id}, runtime {plan.runtime})",
        f"gpu         {plan.gpu['key']}  SM {plan.gpu['compute_capability'] or '-'}  {plan.gpu['architecture']}",
        f"checkpoint  {plan.checkpoint}  ({plan.checkpoint_kind})",
        f"engine dir  {plan.engine_dir}",
        f"limits      max_input_len {lim.max_input_len}, max_seq_len {lim.max_seq_len}, "
        f"max_batch_size {lim.max_batch_size}, max_num_tokens {lim.max_num_tokens}",
        _memory_line(m),
        *_slo_lines(plan),
    ]
    if plan.lora:
        lines.append(_lora_line(plan.lora))
    if plan.speculative:
        lines.append(f"speculative {plan.speculative}" + (f"  draft {plan.draft}" if plan.draft else ""))
    if plan.command:
        parts = plan.command_line.split(" --")
        lines.append("command     " + " \\\n              --".join(parts))
        lines.append("why")
        lines.extend(f"  {f.name} {' '.join([f.value or '', *f.extra])}: {f.why}" for f in plan.flags if f.why)
    if plan.draft_command:
        lines.append("draft       " + " ".join(plan.draft_command))
    for note in plan.notes:
        lines.append(f"note        {note}")
    return "\n".join(lines)

"""`pipeline render`: an engine folder -> a checked Triton model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.cli._options import ForceOpt, JsonOpt, OutDirOpt, set_json, spec_from_options
from pipeline.core.output import OUT, simple_table
from pipeline.render import RenderSpec, render as render_repo

EngineOpt = Annotated[Path, typer.Option("--engine", help=(
    "Engine folder or PyTorch-backend deployable (build/<model>/engines/<profile-id>/); a deployable renders "
    "NVIDIA's LLM-API layout (one tensorrt_llm model)."))]
TokenizerOpt = Annotated[Optional[Path], typer.Option("--tokenizer", help="Tokenizer folder (default: <engine>/tokenizer).")]
ModelRootOpt = Annotated[Optional[Path], typer.Option(
    "--model-root", help="Absolute path the bundle will have where it is served, e.g. /models (default: --out itself).")]
RuntimeOpt = Annotated[Optional[str], typer.Option("--runtime", help=(
    "tensorrtllm or reference for an engine folder; llmapi or reference for a PyTorch-backend deployable "
    "(default: from the folder)."))]
DecoupledOpt = Annotated[bool, typer.Option("--decoupled/--no-decoupled", help="Decoupled transaction policy (needed for streaming).")]
BatchingOpt = Annotated[str, typer.Option("--batching-strategy", help="inflight_fused_batching, inflight_batching or V1.")]
SchedulerOpt = Annotated[str, typer.Option("--batch-scheduler-policy", help="guaranteed_no_evict or max_utilization.")]
KvFractionOpt = Annotated[Optional[float], typer.Option(
    "--kv-cache-free-gpu-mem-fraction", help="Share of free GPU memory for the KV cache (default: the SLO plan's for an "
    "engine built with `pipeline build --slo`, else 0.9).")]
KvTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens-in-paged-kv-cache", help="Cap on KV-cache tokens.")]
KvReuseOpt = Annotated[Optional[bool], typer.Option("--enable-kv-cache-reuse/--no-kv-cache-reuse",
                                                    help="Prefix caching (default: on for tensorrtllm, off for reference).")]
ChunkedOpt = Annotated[bool, typer.Option("--enable-chunked-context/--no-chunked-context", help="Context chunking.")]
ExcludeOpt = Annotated[bool, typer.Option("--exclude-input-in-output/--include-input-in-output",
                                          help="Default for requests that do not say: return only the completion.")]
QueueDelayOpt = Annotated[int, typer.Option("--max-queue-delay-us", min=0, help="Dynamic-batcher queue delay (µs).")]
QueueSizeOpt = Annotated[int, typer.Option("--max-queue-size", min=0, help="Queued requests before rejecting (0: unlimited).")]
QueueTimeoutOpt = Annotated[int, typer.Option("--queue-timeout-us", min=0, help="Reject requests queued longer than this (0: never).")]
InstancesOpt = Annotated[int, typer.Option("--instances", min=1, help="preprocessing/postprocessing instances.")]
BlsInstancesOpt = Annotated[Optional[int], typer.Option(
    "--bls-instances", min=1, help="BLS Python stubs (default: up to 4; each serves max_batch_size/instances streams).")]
LogitsDtypeOpt = Annotated[Optional[str], typer.Option(
    "--logits-dtype", help="fp32, fp16 or bf16 (default: the engine's own; another value is refused).")]


def register(app: typer.Typer) -> None:
    app.command("render")(render)


def render(
    engine: EngineOpt,
    tokenizer: TokenizerOpt = None,
    runtime: RuntimeOpt = None,
    out: OutDirOpt = None,
    model_root: ModelRootOpt = None,
    decoupled: DecoupledOpt = True,
    batching_strategy: BatchingOpt = "inflight_fused_batching",
    batch_scheduler_policy: SchedulerOpt = "guaranteed_no_evict",
    kv_cache_free_gpu_mem_fraction: KvFractionOpt = None,
    max_tokens_in_paged_kv_cache: KvTokensOpt = None,
    enable_kv_cache_reuse: KvReuseOpt = None,
    enable_chunked_context: ChunkedOpt = False,
    exclude_input_in_output: ExcludeOpt = False,
    max_queue_delay_us: QueueDelayOpt = 0,
    max_queue_size: QueueSizeOpt = 0,
    queue_timeout_us: QueueTimeoutOpt = 0,
    instances: InstancesOpt = 1,
    bls_instances: BlsInstancesOpt = None,
    logits_dtype: LogitsDtypeOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Render the Triton model repository for an engine (five models, engine, tokenizer) or for a PyTorch-backend
    deployable (NVIDIA's LLM-API model and the checkpoint): a self-contained bundle."""
    set_json(json_output)
    spec = spec_from_options(
        RenderSpec, engine=engine, tokenizer=tokenizer, runtime=runtime, out=out, model_root=model_root, decoupled=decoupled,
        batching_strategy=batching_strategy, batch_scheduler_policy=batch_scheduler_policy,
        kv_cache_free_gpu_mem_fraction=kv_cache_free_gpu_mem_fraction,
        max_tokens_in_paged_kv_cache=max_tokens_in_paged_kv_cache, enable_kv_cache_reuse=enable_kv_cache_reuse,
        enable_chunked_context=enable_chunked_context, exclude_input_in_output=exclude_input_in_output,
        max_queue_delay_us=max_queue_delay_us, max_queue_size=max_queue_size, queue_timeout_us=queue_timeout_us,
        instances=instances, bls_instances=bls_instances, logits_dtype=logits_dtype, force=force,
    )
    result = render_repo(spec)
    rows = [["repository", result.repo], ["model root", result.model_root], ["runtime", result.runtime],
            ["max_batch_size", result.max_batch_size], ["models", ", ".join(result.models)], ["reused", result.reused],
            ["engine files", f"{result.bundle.get('linked_files', 0)} hard-linked, {result.bundle.get('copied_files', 0)} copied"]]
    rows += [[f"check: {name}", detail] for name, detail in result.checks.items()]
    rows += [["note", note] for note in result.notes]
    OUT.result(result, table=simple_table("Triton model repository", ["what", "value"], rows))


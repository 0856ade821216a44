"""`pipeline plan`: memory, build limits and predicted TTFT/TPOT/throughput for a model on a GPU."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from pipeline.cli._options import AttentionDpOpt, BackendOpt, GoalOpt, JsonOpt, KvCacheOpt, set_json
from pipeline.cli._plan_search import (BatchSizesOpt, CalibrateOpt, GpusOpt, PlanOutOpt, PpsOpt, PriceOpt, PricesOpt, RateOpt,
                                      SloOpt, TpsOpt, calibrate_only, int_list, search_command)
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.output import OUT, simple_table
from pipeline.download.config import planning_config
from pipeline.planner import PlanResult, PlanSpec, plan
from pipeline.planner.entry import SpeculationInput
from pipeline.planner.memory import what_fits_hint

PlanGpuOpt = Annotated[Optional[str], typer.Option("--gpu", help="GPU key from `pipeline gpus` (one configuration; --slo searches --gpus).")]
PlanQuantOpt = Annotated[Optional[str], typer.Option("--quant", help="fp16, bf16, fp8, int8_sq, int8_wo, int4_wo, int4_awq, w4a8_awq, nvfp4; with --slo a list (default fp8,int4_awq,fp16). A quantized checkpoint (hf_quant_config.json, config.json quantization_config) is planned as stored.")]
ModelConfigOpt = Annotated[str, typer.Option("--model", help="HF model folder or its config.json (no weights needed); hf:org/name[@revision] (its config.json alone is fetched); or a model whose shapes ship with the pipeline, e.g. llama-3.1-405b.")]
IslOpt = Annotated[int, typer.Option("--isl", min=1, help="Input sequence length (prompt tokens).")]
OslOpt = Annotated[int, typer.Option("--osl", min=1, help="Output sequence length (generated tokens).")]
ConcurrencyOpt = Annotated[int, typer.Option("--concurrency", min=1, help="Concurrent clients for the latency prediction.")]
KvFractionOpt = Annotated[
    Optional[float],
    typer.Option("--kv-fraction", min=0.01, max=1.0, help="kv_cache_free_gpu_mem_fraction (default: 0.95 throughput, 0.9 latency)."),
]

AcceptanceOpt = Annotated[Optional[float], typer.Option(
    "--speculative-acceptance", min=0.0, max=1.0,
    help="Predict speculative decoding at this per-token acceptance rate (bench --speculative measures it).")]
DraftLenOpt = Annotated[int, typer.Option("--max-draft-len", min=1, help="Draft tokens per step, with --speculative-acceptance.")]
DraftModelOpt = Annotated[Optional[str], typer.Option("--draft-model", help="draft-target: the draft's HF folder or config.json, hf:org/name or a shipped model's name, as for --model (its decode steps count).")]
TrtllmBenchOpt = Annotated[Optional[int], typer.Option(
    "--trtllm-bench-requests", min=1,
    help="Also predict what `trtllm-bench throughput` reports for a dataset of this many requests of exactly --isl/--osl "
         "(its own limits; --kv-fraction as you pass it to trtllm-bench, else its default 0.90).")]
TpotSloOpt = Annotated[Optional[float], typer.Option("--tpot-slo-ms", min=0.001, help="With --speculative-acceptance: the TPOT SLO the call is made for.")]


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)


def plan_command(
    model: ModelConfigOpt,
    gpu: PlanGpuOpt = None,
    quant: PlanQuantOpt = None,
    kv_cache: KvCacheOpt = None,
    tp: TpsOpt = None,
    pp: PpsOpt = None,
    isl: IslOpt = 1024,
    osl: OslOpt = 128,
    concurrency: ConcurrencyOpt = 1,
    goal: GoalOpt = "throughput",
    kv_fraction: KvFractionOpt = None,
    slo: SloOpt = None,
    rate: RateOpt = None,
    gpus: GpusOpt = None,
    backend: BackendOpt = "tensorrt",
    batch_sizes: BatchSizesOpt = None,
    prices: PricesOpt = None,
    price: PriceOpt = None,
    calibrate: CalibrateOpt = None,
    speculative_acceptance: AcceptanceOpt = None,
    max_draft_len: DraftLenOpt = 4,
    draft_model: DraftModelOpt = None,
    tpot_slo_ms: TpotSloOpt = None,
    trtllm_bench_requests: TrtllmBenchOpt = None,
    attention_dp: AttentionDpOpt = False,
    out: PlanOutOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Will it fit, how fast will it be, and which trtllm-build limits to use (from config.json alone).

    With --slo: which build on which GPU meets TTFT/TPOT SLOs, and at what cost; with --calibrate: how far off it is."""
    set_json(json_output)
    model = planning_config(model)
    if trtllm_bench_requests and (slo or calibrate):
        raise InvalidInputError("--trtllm-bench-requests predicts one configuration's trtllm-bench run, not a search or a "
                                "calibration.", hint="Give --gpu KEY (and --quant, --tp) without --slo/--calibrate.")
    if attention_dp and calibrate and not slo:
        raise InvalidInputError("--attention-dp does not apply to a calibration alone: each bench's deployment says whether it "
                                "ran with attention data parallelism.", hint="Drop --attention-dp, or add --slo to search with it.")
    if slo:
        opts = dict(rate=rate, gpus=gpus or gpu, quant=quant, kv_cache=kv_cache, tp=tp, pp=pp, backend=backend,
                    batch_sizes=batch_sizes, prices=prices, price=price, calibrate=calibrate, out=out, attention_dp=attention_dp)
        return search_command(model, slo, isl, osl, opts)
    if calibrate:
        return calibrate_only(model, list(calibrate), gpus or gpu, backend)
    if not gpu:
        raise InvalidInputError("Plan for which GPU?", hint="Give --gpu KEY for one configuration, or --slo ... to search GPUs.")
    tp_size, pp_size = (_one_size(value, flag) for value, flag in ((tp, "--tp"), (pp, "--pp")))
    spec = PlanSpec(
        model=model, gpu=gpu, quant=quant, kv_cache=kv_cache, tp=tp_size, pp=pp_size, isl=isl, osl=osl,
        concurrency=concurrency, goal=goal, kv_cache_free_gpu_mem_fraction=kv_fraction, backend=backend,
        trtllm_bench_requests=trtllm_bench_requests, attention_dp=attention_dp,
        speculation=None if speculative_acceptance is None else SpeculationInput(
            acceptance=speculative_acceptance, max_draft_len=max_draft_len, tpot_slo_ms=tpot_slo_ms,
            draft_model=planning_config(draft_model, "--draft-model") if draft_model else None),
    )
    result = plan(spec)
    OUT.result(result, table=_table(result))
    if not result.fits:
        raise UnsupportedError(
            f"{result.model['name']} ({result.quant}, {result.tp}x {result.gpu}"
            + (f" in {result.pp} pipeline stages" if result.pp > 1 else "") + ") has no room for one "
            f"{isl + osl}-token sequence: {result.memory.weights_gib:.1f} GiB of weights per GPU on "
            f"{result.memory.gpu_memory_gib:.0f} GiB.",
            hint=what_fits_hint(result.alternatives, isl + osl, result.gpu),
        )


def _one_size(text: str | None, flag: str) -> int:
    sizes = int_list(text, (1,), flag) or (1,)
    if len(sizes) > 1:
        raise InvalidInputError(f"{flag} {text}: one size for one configuration.", hint=f"Give one {flag}, or search several with --slo.")
    return sizes[0]


def _attention(model: dict) -> str:
    latent = model.get("latent_attention")
    if latent:
        return (f"{model['heads']} heads with a latent KV cache of {latent['kv_lora_rank']} + {latent['qk_rope_head_dim']} per "
                "token and layer")
    return f"{model['heads']} heads / {model['kv_heads']} KV heads x {model['head_dim']}"


def _stored(model: dict) -> str:
    """How the checkpoint says it is stored ("" where it declares nothing)."""
    if not model.get("checkpoint_quant"):
        return ""
    experts = f" with {model['expert_weights'].upper()} experts" if model.get("expert_weights") else ""
    kept = f", {model['sixteen_bit_params_b']} B of its linear weights left 16-bit" if model.get("sixteen_bit_params_b") else ""
    return f"; checkpoint stored as {model['checkpoint_quant']}{experts}{kept}"


def _table(result: PlanResult):
    mem, model = result.memory, result.model
    stored = _stored(model)
    rows: list[list[object]] = [
        ["model", f"{model['name']}: {model['params_b']} B params{stored}, {model['layers']} layers, "
                  + _attention(model)
                  + "".join(f", {layers} layers windowed to {window} tokens" for window, layers in model.get("sliding_windows", {}).items())
                  + "".join(f", {layers} layers in {chunk}-token chunks" for chunk, layers in model.get("attention_chunks", {}).items())
                  + (" (engines attend to the whole context)" if (model.get("sliding_windows") or model.get("attention_chunks"))
                     and result.backend == "tensorrt" else "")],
        ["target", f"{result.tp}x {result.gpu}, weights {result.quant}, KV cache {result.kv_cache}, "
                   f"ISL {result.isl} / OSL {result.osl}, goal {result.goal}, backend {result.backend}"
                   + (f", attention data parallel with the experts over the {result.tp} GPUs (DEP{result.tp}): memory, "
                      "sequences and limits per GPU" if result.attention_dp else "")
                   + (f", {result.pp} pipeline stages ({result.tp * result.pp} GPUs): memory per GPU of the fullest stage, "
                      f"sequences the whole pipeline's, limits per micro-batch ({result.pp} in flight)" if result.pp > 1 else "")
                   + (f", across {result.nodes} nodes" if result.nodes > 1 else "")],
        ["weights per GPU", f"{mem.weights_gib:.2f} GiB (whole model {model['weights_gib_total']:.2f} GiB)"],
        ["runtime + activations", f"{mem.reserve_gib:.2f} GiB of {mem.gpu_memory_gib:.0f} GiB"],
        ["KV cache", f"{mem.kv_cache_gib:.2f} GiB at fraction {mem.kv_cache_free_gpu_mem_fraction} = "
                     f"{mem.kv_capacity_tokens:,} tokens ({mem.kv_bytes_per_token / 1024:.0f} KiB/token/GPU)"],
        ["max sequences", f"{mem.max_sequences} at {result.isl + result.osl} tokens" + ("" if mem.fits else "  DOES NOT FIT")],
    ]
    for alt in result.alternatives:
        rows.append(["would fit", f"{alt.flags()} ({alt.max_sequences} sequences)"])
    if result.prediction is not None:
        p = result.prediction
        rows += [
            [f"at concurrency {p.concurrency}", f"TTFT {p.ttft_ms:.1f} ms, TPOT {p.tpot_ms:.2f} ms, "
                                                f"{p.output_tokens_per_s:,.0f} output tok/s ({p.output_tokens_per_s_per_user:.1f} per user), batch {p.batch}"],
        ]
    if result.max_throughput is not None:
        t = result.max_throughput
        rows.append(["max throughput", f"{t.output_tokens_per_s:,.0f} output tok/s at batch {t.batch} "
                                       f"({t.step_ms:.1f} ms/step, bound by {t.bound})"])
    if result.trtllm_bench is not None:
        b = result.trtllm_bench
        rows.append(["trtllm-bench throughput", f"{b.output_tokens_per_s:,.0f} output tok/s ({b.output_tokens_per_s_per_gpu:,.0f} per GPU) "
                     f"for {b.requests:,} requests of {result.isl}/{result.osl}, with its own max_batch_size {b.max_batch_size} and "
                     f"max_num_tokens {b.max_num_tokens} at KV fraction {b.kv_cache_free_gpu_mem_fraction}; up to {b.batch} in flight, "
                     f"bound by {b.bound}"])
    build = result.build
    if result.backend == "pytorch":
        rows.append(["recommended LLM-API options", f"max_batch_size {build['max_batch_size']}, max_num_tokens "
                     f"{build['max_num_tokens']}, max_seq_len {build['max_seq_len']}, kv_cache_config.free_gpu_memory_fraction "
                     f"{build['kv_cache_free_gpu_mem_fraction']}"
                     + (f", enable_attention_dp true, moe_expert_parallel_size {result.tp}" if result.attention_dp else "")
                     + (f", pipeline_parallel_size {result.pp}" if result.pp > 1 else "")])
    else:
        rows.append(["recommended build", f"--max_batch_size {build['max_batch_size']} --max_num_tokens {build['max_num_tokens']} "
                                          f"--max_input_len {build['max_input_len']} --max_seq_len {build['max_seq_len']}; "
                                          f"kv_cache_free_gpu_mem_fraction {build['kv_cache_free_gpu_mem_fraction']}"
                                          + (f"; a checkpoint converted with --pp {result.pp}" if result.pp > 1 else "")])
    if result.speculation is not None:
        spec = result.speculation
        rows.append([f"speculation (acceptance {spec.acceptance}, K {spec.max_draft_len})",
                     f"{spec.tokens_per_step} tokens/step; speedup " + ", ".join(f"c={p.concurrency} {p.speedup:.2f}x" for p in spec.points)
                     + (f"; break-even concurrency {spec.break_even_concurrency}" if spec.break_even_concurrency else "; pays at every batch")])
        rows.append(["speculation: enable?", f"{'yes' if spec.enable else 'no'}: {spec.why}"])
    rows += [["caveat", caveat] for caveat in result.caveats]
    return simple_table("Capacity and latency plan (predictions from datasheet figures x fitted global efficiencies)", ["", "value"], rows)

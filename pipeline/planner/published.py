"""Checking the time model against TensorRT-LLM's published `trtllm-bench throughput` figures
(pipeline/data/trtllm_published_throughput.tsv: engine rows of 0.17, PyTorch-backend rows of 1.0 and later;
scripts/plan_vs_published.py fits the constants and cross-validates them)."""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from pipeline.core.errors import InvalidInputError
from pipeline.data import packaged_fact_rows
from pipeline.planner.checkpoint import sixteen_bit_linear_params
from pipeline.planner.rates import EFFICIENCY, Efficiency, efficiency_for
from pipeline.planner.recommend import recommend_build, round_up, tokens_for
from pipeline.planner.scenario import Scenario, as_gpu
from pipeline.planner.shapes import ModelSpec, model_spec_from_dict
from pipeline.planner.timing import ThroughputEstimate, ThroughputRun, throughput_estimate, throughput_run

# FP8 and FP4 rows: NVIDIA's FP8/NVFP4 checkpoints with an FP8 KV cache (the rows say so: refitted with a 16-bit cache,
# each backend's loss grows 16-20x; scripts/plan_vs_published.py --kv-check); FP16/BF16: a 16-bit KV cache. MXFP4 rows (GPT-OSS):
# OpenAI's checkpoints as they are, with the KV cache of the 1.2-dev page's options (NVIDIA/TensorRT-LLM@03e27c7d
# docs/source/developer-guide/perf-overview.md, GPT-OSS llm_options.yml): FP8, "Hopper: use auto".
_PUBLISHED_PRECISIONS = {"FP8": ("fp8", "fp8"), "FP4": ("nvfp4", "fp8"), "FP16": ("fp16", "auto"), "BF16": ("bf16", "auto")}
PUBLISHED_KV_FRACTION = 0.95  # the perf-overview runs use --kv_cache_free_gpu_mem_fraction 0.95
TRTLLM_BENCH_KV_FRACTION = 0.90  # trtllm-bench's own default ("the default setting of 0.90": the 1.2-dev page @03e27c7d)
BACKENDS = ("tensorrt", "pytorch")


def published_rows(backend: str | None = None) -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput.tsv (tokens_per_s is the TP group's total), one backend or all."""
    rows = packaged_fact_rows("trtllm_published_throughput.tsv")
    if backend is not None and backend not in BACKENDS:
        raise InvalidInputError(f"Unknown backend {backend!r}.", hint=f"Use one of: {', '.join(BACKENDS)}.")
    return [row for row in rows if backend is None or row["backend"] == backend]


def more_model_rows(model_prefix: str | None = None) -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput_more_models.tsv, the models no fit of the main table sees (0.17
    engines: Mistral 7B, and Mixtral 8x7B and 8x22B, which fit the engines' MoE constant alone; 1.0's PyTorch backend:
    Qwen3-30B-A3B and Llama 4 Scout), those whose model name starts with `model_prefix` or all."""
    rows = packaged_fact_rows("trtllm_published_throughput_more_models.tsv")
    return [row for row in rows if model_prefix is None or row["model"].startswith(model_prefix)]


def dep_rows() -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput_dep.tsv: the 1.2-dev page's MoE runs with attention data
    parallelism and the experts spread over the same GPUs (DEP), which no fit sees."""
    return packaged_fact_rows("trtllm_published_throughput_dep.tsv")


def mla_rows() -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput_mla.tsv: the 1.2-dev page's DeepSeek R1 runs (multi-head latent
    attention, DEP), which no fit sees."""
    return packaged_fact_rows("trtllm_published_throughput_mla.tsv")


def more_gpu_rows() -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput_more_gpus.tsv: 1.0's PyTorch-backend rows on GPUs no fit sees
    (GB200; RTX PRO 6000 Blackwell Server Edition), whose figures are pipeline/data/gpus_added.tsv's."""
    return packaged_fact_rows("trtllm_published_throughput_more_gpus.tsv")


def pp_rows() -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput_pp.tsv: the runs with pipeline parallelism (RTX PRO 6000, 1.0 and
    1.2-dev), which no fit sees."""
    return packaged_fact_rows("trtllm_published_throughput_pp.tsv")


def earlier_release_rows() -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput_0_20.tsv: 0.20's PyTorch-backend rows of the dense Llama models,
    most at TP degrees no fit sees, which no fit sees either."""
    return packaged_fact_rows("trtllm_published_throughput_0_20.tsv")


@lru_cache(maxsize=1)
def shipped_model_names() -> tuple[str, ...]:
    """The models whose shapes the package ships (pipeline/data/published_models/): every model a published table names."""
    folder = resources.files("pipeline.data").joinpath("published_models")
    return tuple(sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")))


def shipped_config(name: str) -> Path | None:
    """The shipped config of a model by its name (`llama-3.1-405b`), to plan it before any weight is downloaded; None for
    a name the package has no shapes for."""
    if name not in shipped_model_names():
        return None
    return Path(str(resources.files("pipeline.data").joinpath("published_models", f"{name}.json")))


@lru_cache(maxsize=None)
def published_model(name: str) -> ModelSpec:
    """The shapes of a model named in the published table (pipeline/data/published_models/<name>.json)."""
    import json

    path = shipped_config(name)
    if path is None:
        raise InvalidInputError(f"No shapes for published model {name!r}.", hint=f"Known: {', '.join(shipped_model_names())}.")
    return model_spec_from_dict(json.loads(path.read_text(encoding="utf-8")), name, source=str(path))


def published_scenario(model: ModelSpec, row: dict[str, Any]) -> Scenario:
    """The Scenario of one published row (gpu, precision, tp, isl, osl; attention_dp "true" for the DEP rows). The KV cache
    is the precision's (FP8 and FP4 rows: FP8) unless the row names its own in a `kv_cache` column."""
    precision = str(row["precision"])
    gpu = as_gpu(row["gpu"])
    if precision.upper() == "MXFP4":  # the checkpoint as published (MXFP4 experts); the page's KV cache: "fp8 # Hopper: use auto"
        quant, kv = model.checkpoint_quant or "bf16", "fp8" if gpu.cc >= 10.0 else "auto"
    else:
        try:
            quant, kv = _PUBLISHED_PRECISIONS[precision.upper()]
        except KeyError:
            raise InvalidInputError(
                f"Unknown published precision {precision!r}.", hint=f"Use one of: {', '.join(_PUBLISHED_PRECISIONS)}, MXFP4."
            ) from None
    kv = row.get("kv_cache") or kv
    return Scenario(model, gpu, quant, kv, int(row["tp"]), int(row["isl"]), int(row["osl"]), attention_dp=is_dep_row(row),
                    pp=int(row.get("pp") or 1))


def is_dep_row(row: dict[str, Any]) -> bool:
    """Whether a published row ran with attention data parallelism (its attention_dp column, the DEP table's)."""
    return str(row.get("attention_dp", "")).lower() == "true"


# trtllm-bench's own limits (NVIDIA/TensorRT-LLM@04cba882 tensorrt_llm/bench/build/tuning.py, calc_engine_setting and
# finetune_setting; the same heuristic serves `trtllm-bench build` and, via get_settings, `throughput --backend pytorch`):
# memory = device GiB x GPUs (tp x pp) - param_count x bytes per weight (FP8 1, NVFP4 0.5, else 2), no reserve; KV bytes per
# token over the whole TP group with max(tp, kv_heads) heads; x 0.95; requests = memory / (KV bytes x (ISL+OSL));
# max_batch_size (one micro-batch's) from min(requests, 4096) / pp rounded up (at least 64), max_num_tokens from that
# UNROUNDED batch x (1 + ISL/OSL), capped 32768, rounded up (at least 2048). At run time the batch is further capped by the real KV cache (planner.memory).
# PyTorch backend: chunked prefill is off unless asked (tensorrt_llm/bench/benchmark/utils/general.py@0171265e get_settings:
# then max_num_tokens = max(heuristic, max ISL + max_batch_size)); the 1.0 page's llm_options.yml asks only for CUDA graphs
# (NVIDIA/TensorRT-LLM@00f37686 docs/source/performance/perf-overview.md). The 0.17 engine runs need chunked context: their
# max_num_tokens (2048 for the 70B A100 rows) is below ISL 5000/20000, which runs only in chunks.
# param_count is not the model's: trtllm-bench sums the elements its safetensors hold (bench/build/dataclasses.py @04cba882
# ModelConfig.get_param_count, safetensors metadata parameter_count). A checkpoint that packs two 4-bit weights to a byte
# counts half of them, plus one element per scale: NVFP4 linears (ModelOpt: an FP8 scale per 16; trtllm_pytorch_checkpoint.json's
# NVFP4LinearMethod) 1/2 + 1/16 of their weights, GPT-OSS's MXFP4 experts (a UE8 scale per 32) 1/2 + 1/32. Its byte table
# has no MXFP4 entry (BYTES_PER_ELEM.get(quant_algo, 2)), so an MXFP4 checkpoint's elements count 2 bytes each.
_BENCH_WEIGHT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}
_STORED_ELEMENTS = {"nvfp4": 1 / 2 + 1 / 16}
_MXFP4_STORED_ELEMENTS = 1 / 2 + 1 / 32
_GIB = 1024**3


def bench_param_count(model: ModelSpec, quant: str = "bf16") -> float:
    """The parameter count trtllm-bench reads from a checkpoint of `model` at `quant` (see the comment above)."""
    linear = model.linear_params
    experts = model.routed_expert_params if model.expert_weights == "mxfp4" else 0
    packed = _STORED_ELEMENTS.get(quant, 1.0)
    return model.param_count - linear + (linear - experts) * packed + experts * _MXFP4_STORED_ELEMENTS


def bench_head_size(model: ModelSpec) -> int:
    """The head size trtllm-bench's heuristic reads from the config (ModelConfig.head_size: a `head_dim` key, else
    hidden_size / num_attention_heads). DeepSeek's own configs, loaded through their remote code, have no head_dim, so
    an MLA model counts hidden / heads (56 for DeepSeek-V3/R1) and its num_key_value_heads (128) as if it cached them:
    the heuristic learnt the latent cache only in NVIDIA/TensorRT-LLM#16707 (merged July 2026, "overestimating KV
    bytes/token ~25x for MLA models"), after the 1.2-dev page's runs and the pinned 1.1.0."""
    return model.hidden_size // model.num_heads if model.latent_attention else model.head_dim


def trtllm_bench_limits(scenario: Scenario, backend: str = "tensorrt", kv_fraction: float = PUBLISHED_KV_FRACTION) -> dict[str, Any]:
    """The max_batch_size / max_num_tokens trtllm-bench picks for this scenario (see the comment above) when run with
    --kv_cache_free_gpu_mem_fraction `kv_fraction`, as a build."""
    model, tp, isl, osl = scenario.model, scenario.tp, scenario.isl, scenario.osl
    kv_bytes = 1.0 if scenario.kv.name == "fp8" else 2.0
    per_token_gib = 2 * model.num_layers * max(tp, model.num_kv_heads) * bench_head_size(model) * kv_bytes / _GIB
    memory_gib = (scenario.gpu.usable_memory_gib or 0) * scenario.gpus - bench_param_count(model, scenario.quant.name) * _BENCH_WEIGHT_BYTES.get(scenario.quant.name, 2.0) / _GIB
    requests = max(0.0, memory_gib * kv_fraction / (per_token_gib * (isl + osl)))
    raw_bs = min(requests, 4096) / scenario.pp  # per micro-batch
    if raw_bs < 256:
        max_bs = max(64, round_up(raw_bs, 32))
    else:
        max_bs = round_up(raw_bs, 128 if raw_bs < 1024 else 256)
    max_tokens = tokens_for(raw_bs, isl, osl)  # from the unrounded request count, as finetune_setting does
    chunked = backend != "pytorch"
    if not chunked:
        max_tokens = max(max_tokens, isl + max_bs)
    return {"max_batch_size": max_bs, "max_num_tokens": max_tokens, "max_input_len": isl, "max_seq_len": isl + osl,
            "kv_cache_free_gpu_mem_fraction": kv_fraction, "chunked_prefill": chunked,
            "dynamic_batch_size": backend != "pytorch"}


@lru_cache(maxsize=1)
def _bench_requests() -> dict[tuple[str, int, int], int]:
    return {(row["trtllm_version"], int(row["isl"]), int(row["osl"])): int(row["num_requests"])
            for row in packaged_fact_rows("trtllm_bench_requests.tsv")}


def bench_requests(trtllm_version: str, isl: int, osl: int) -> int | None:
    """How many requests the perf-overview page of this version gave its ISL/OSL run (data/trtllm_bench_requests.tsv);
    None where the page names none."""
    return _bench_requests().get((trtllm_version, isl, osl))


def trtllm_bench_throughput(
    scenario: Scenario, *, efficiency: Efficiency | None = None, backend: str = "tensorrt", requests: int | None = None,
) -> ThroughputEstimate:
    """What `trtllm-bench throughput` should report for this scenario's ISL/OSL, with trtllm-bench's own limits, for a
    dataset of `requests` requests (None: steady state)."""
    return throughput_estimate(_bench_run(scenario, backend, requests), efficiency or EFFICIENCY)


def _bench_run(scenario: Scenario, backend: str, requests: int | None) -> ThroughputRun:
    recommend_build(scenario, "throughput")  # refuses, naming what fits, when not one ISL+OSL sequence fits
    return throughput_run(scenario, trtllm_bench_limits(scenario, backend), requests)


def _row_run(row: dict[str, str], model: ModelSpec | None = None) -> ThroughputRun:
    """A published row's run as trtllm-bench gave it (its page's request count, where the page names one)."""
    scenario = published_scenario(_row_model(row, model), row)
    requests = bench_requests(str(row.get("trtllm_version", "")), int(row["isl"]), int(row["osl"]))
    return _bench_run(scenario, row.get("backend") or "tensorrt", requests)


def _row_model(row: dict[str, str], model: ModelSpec | None) -> ModelSpec:
    """The row's model as its run's checkpoint stored it: the linear layers it left unquantized (`checkpoint_excludes`,
    module-name globs, where the table names them) in 16-bit."""
    spec = model or published_model(row["model"])
    globs = _excluded(row)
    return spec.model_copy(update={"sixteen_bit_params": sixteen_bit_linear_params(spec, globs)}) if globs else spec


def _excluded(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(glob for glob in (row.get("checkpoint_excludes") or "").split(",") if glob)


def _error_pct(predicted: float, published: float) -> float:
    return round(100 * (predicted - published) / published, 2)


def compare_published(
    model: ModelSpec | None, rows: list[dict[str, str]], *, efficiency: Efficiency | None = None
) -> list[dict[str, Any]]:
    """Predicted vs published output tokens/s (the TP group's total) for rows of the published table.
    model None: each row's own model (its `model` column); efficiency None: the row's backend's constants."""
    out = []
    for row in rows:
        run, excluded = _row_run(row, model), _excluded(row)
        backend = row.get("backend") or "tensorrt"
        estimate = throughput_estimate(run, efficiency or efficiency_for(backend))
        published = float(row["tokens_per_s"])
        out.append({
            "backend": backend, "trtllm_version": row.get("trtllm_version", ""), "model": run.scenario.model.name, "gpu": row["gpu"], "tp": int(row["tp"]), "precision": row["precision"],
            **({"attention_dp": True} if is_dep_row(row) else {}), **({"pp": run.scenario.pp} if run.scenario.pp > 1 else {}),
            **({"checkpoint_excludes": excluded} if excluded else {}),
            "isl": int(row["isl"]), "osl": int(row["osl"]),
            "published_tokens_per_s": published, "predicted_tokens_per_s": estimate.output_tokens_per_s,
            "error_pct": _error_pct(estimate.output_tokens_per_s, published),
            "batch": estimate.batch, "bound": estimate.bound,
        })
    return out


def error_summary(comparison: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows, median and worst |error| % of a compare_published result."""
    return {"rows": len(comparison), "median_abs_pct_error": median_abs_pct_error(comparison),
            "max_abs_pct_error": max(abs(r["error_pct"]) for r in comparison)}


def log_loss(rows: list[dict[str, str]], efficiency: Efficiency) -> float:
    """Sum of squared log ratios of predicted to published: a relative error that treats over- and under-prediction
    alike (what the fits of scripts/plan_vs_published.py and scripts/plan_vs_more_models.py minimise)."""
    return loss_over(rows)(efficiency)


def loss_over(rows: list[dict[str, str]]) -> Callable[[Efficiency], float]:
    """log_loss over these rows as a function of the constants alone, for a fit to evaluate hundreds of times: each row's
    run is laid out once, and each iteration's work once per structure of the constants (planner.step.StepWork), so an
    evaluation redoes only the arithmetic the constants enter. The same figures as compare_published's, to the bit."""
    runs = [(_row_run(row), float(row["tokens_per_s"])) for row in rows]

    def loss(efficiency: Efficiency) -> float:
        return sum(math.log(1 + _error_pct(round(run.tokens_per_s(run.mean_step(efficiency)), 2), published) / 100) ** 2
                   for run, published in runs)
    return loss


def comparison_log_loss(comparison: list[dict[str, Any]]) -> float:
    """log_loss of a compare_published result already at hand."""
    return sum(math.log(1 + r["error_pct"] / 100) ** 2 for r in comparison)


def median_abs_pct_error(comparison: list[dict[str, Any]]) -> float:
    errors = sorted(abs(row["error_pct"]) for row in comparison)
    if not errors:
        return float("nan")
    middle = len(errors) // 2
    return errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2

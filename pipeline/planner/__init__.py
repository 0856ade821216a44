"""The planner (`pipeline plan`): a capacity and latency model for serving a Hugging Face causal LM
with TensorRT-LLM, all arithmetic on the model's shapes (its config.json, no weights) and the GPU table.

One value is passed around: a frozen `Scenario` (model, gpu, quant, kv, tp, isl, osl, attention_dp, pp). The rooms:

- shapes: ModelSpec, model_spec_from_config (model_spec_from_dict for a config already read), check_tp;
- scenario: Scenario, Goal;
- stages: pipeline parallelism (pipeline_stage: the fullest stage as a model of its own; the hand-over between stages);
- memory: weight/KV/activation bytes, MemoryPlan, memory_plan, alternatives (what fits instead);
- comm: collectives measured on silicon (TP's all-reduce; attention data parallelism's all-gather and reduce-scatter);
- rates: GPU compute/bandwidth and the fitted Efficiency constants;
- recommend: recommend_build (trtllm-build limits per goal);
- step: step_time (one iteration: StepWork laid out, then timed by the constants), mean_step;
- timing: prefill_time, predict, max_throughput (a ThroughputRun timed);
- published: published_rows, more_model_rows, more_gpu_rows, dep_rows, mla_rows, pp_rows, earlier_release_rows, published_model, trtllm_bench_throughput, compare_published (the check
  against published figures of both backends), error_summary, log_loss (loss_over: the same, for a fit), comparison_log_loss;
- caveats: what those figures say beside a plan (MoE, GPUs no fit saw, TP's all-reduce bound, TTFT p50, pipeline stages);
- entry: plan() with PlanSpec / PlanResult.
"""

from pipeline.planner.entry import PlanResult, PlanSpec, plan
from pipeline.planner.memory import (DEFAULT_KV_FRACTION, GIB, RUNTIME_RESERVE_GIB, Alternative, MemoryPlan, activation_bytes,
                                     alternatives, bits_per_weight, kv_bytes_per_token, kv_heads_per_gpu, memory_plan,
                                     weight_bytes, weight_bytes_per_gpu)
from pipeline.planner.published import (
    comparison_log_loss, compare_published, dep_rows, earlier_release_rows, mla_rows, error_summary, log_loss, loss_over, median_abs_pct_error, more_gpu_rows, more_model_rows, pp_rows, published_model, published_rows,
    published_scenario, trtllm_bench_throughput,
)
from pipeline.planner.moe_timing import measured_moe_s
from pipeline.planner.rates import EFFICIENCY, PRIOR, PYTORCH_EFFICIENCY, Efficiency, compute_rate, efficiency_for, hbm_bandwidth
from pipeline.planner.recommend import recommend_build
from pipeline.planner.scenario import GOALS, Goal, Scenario
from pipeline.planner.shapes import ModelSpec, check_tp, model_spec_from_config, model_spec_from_dict
from pipeline.planner.step import StepLoad, StepTime, step_time
from pipeline.planner.timing import Prediction, ThroughputEstimate, max_throughput, predict, prefill_time

__all__ = [
    "DEFAULT_KV_FRACTION", "EFFICIENCY", "PRIOR", "PYTORCH_EFFICIENCY", "efficiency_for", "published_model", "published_rows", "GIB", "GOALS", "RUNTIME_RESERVE_GIB", "Alternative", "Efficiency", "Goal",
    "MemoryPlan", "ModelSpec", "PlanResult", "PlanSpec", "Prediction", "Scenario", "StepLoad", "StepTime",
    "ThroughputEstimate", "activation_bytes", "alternatives", "bits_per_weight", "check_tp", "compare_published", "comparison_log_loss", "error_summary",
    "compute_rate", "dep_rows", "earlier_release_rows", "mla_rows", "hbm_bandwidth", "measured_moe_s", "kv_bytes_per_token", "kv_heads_per_gpu", "log_loss", "loss_over", "max_throughput", "median_abs_pct_error",
    "memory_plan", "model_spec_from_config", "model_spec_from_dict", "more_gpu_rows", "more_model_rows", "plan", "pp_rows", "predict", "prefill_time",
    "published_scenario", "recommend_build", "step_time", "trtllm_bench_throughput", "weight_bytes", "weight_bytes_per_gpu",
]

"""What NVIDIA's published figures say of how far to trust a prediction, printed beside it (`pipeline plan`, the SLO
search): of an MoE prediction, of a model with latent attention, of a GPU no fit saw or no published figure checks, of a
PyTorch-backend prediction bound by TP's all-reduce, of a TTFT p50 bound, of the PyTorch backend's TPOT, and of a plan
with pipeline stages. Each figure is asserted against the report that computes it (scripts/plan_vs_*.py) in
tests/unit/planner/."""

from __future__ import annotations

from pipeline.planner.published import published_rows
from pipeline.planner.rates import Efficiency
from pipeline.planner.shapes import ModelSpec

# What the published rows outside the fit say of MoE predictions (scripts/plan_vs_more_models.py; the figures are asserted
# against that report in tests/unit/planner/test_published.py).
_ENGINE_MOE = ("mixture of experts: the routed experts' math is planned at {share} of the dense GEMM rate, fitted on "
               "TensorRT-LLM 0.17's published Mixtral rows (one Mixtral held out: 4.9% median, 22% worst |error|); MoE "
               "shapes unlike Mixtral's 8 wide experts (e.g. Qwen3's 128 narrow ones) are untested")
_PYTORCH_MOE_MEASURED = ("mixture of experts: the routed experts take the MoE layer time NVIDIA measured on silicon for this "
                         "shape; so timed, its published B200 rows at TP 1 (Qwen3-30B-A3B, Llama 4 Scout; never fitted) came "
                         "out 4.9% and 11.4% off in the median, 38% and 22% at worst")
_PYTORCH_MOE_UNMEASURED = ("mixture of experts: no silicon timing of this MoE shape{where}, so the routed experts are planned "
                           "at the dense GEMM rate, which put the published B200 rows of Qwen3-30B-A3B and Llama 4 Scout "
                           "+48% and +36% fast (median); treat the throughput as an upper bound and calibrate from your own "
                           "bench (pipeline plan --calibrate)")

_PYTORCH_MXFP4 = ("MXFP4 experts (GPT-OSS): NVIDIA's published rows of GPT-OSS 20B and 120B at TP 1 (1.2-dev page; never fitted, "
                  "experts timed on silicon) came out 16.7% and 17.7% off in the median, 34% and 27% at worst: 20B's large-batch "
                  "rows up to 34% fast, 120B on H200 up to 27% slow (AIConfigurator, on the same rows: 24% in "
                  "the median, 57% at worst); treat the throughput as a rough guide and calibrate from your own bench (pipeline plan --calibrate)")

# What the published DeepSeek R1 rows say of a model with multi-head latent attention (scripts/plan_vs_mla.py; asserted in
# tests/unit/planner/test_latent_attention.py).
_LATENT_ATTENTION = ("multi-head latent attention (DeepSeek): NVIDIA's published DeepSeek R1 0528 rows (1.2-dev page, DEP; "
                     "never fitted) came out 26.8% off in the median and 64% at worst, 22% slow on B200 and 50% fast on H200 "
                     "in the mean; AIConfigurator, which times DeepSeek's attention and experts on silicon, lands within 6.3% "
                     "of this planner at the same batch (11 rows), so the gap is in what neither knows of those runs (the "
                     "batch trtllm-bench gave them, first of all): trust the memory plan, treat the throughput as a rough "
                     "guide and calibrate from your own bench (pipeline plan --calibrate)")

_LATENT_TP = ("multi-head latent attention under TP{tp} without attention data parallelism: the latent KV cache is shared by "
              "every head, so each of the {tp} GPUs holds every request's whole cache and together they hold no more sequences "
              "than one; --attention-dp (enable_attention_dp, NVIDIA's DEP runs of DeepSeek) holds each request's cache on one "
              "GPU")

_PYTORCH_DEP = ("attention data parallelism (DEP): NVIDIA's published DEP rows (1.2-dev page; never fitted) came out, where "
                "silicon timed the experts at that expert parallelism, 9.9% off in the median and 37% at worst: Llama 4 "
                "Maverick and Qwen3-235B 4.7-11.4% (median per GPU) on B200 and GB200, but Qwen3-235B 16% and 32% fast on "
                "H200 and H100, and GPT-OSS 120B 28% fast on B200; treat DEP throughput on Hopper as an upper bound")


def accuracy_caveats(model: ModelSpec, backend: str, efficiency: Efficiency, *, moe_measured: bool | None = None,
                     attention_dp: bool = False, moe_carried: tuple[str, str] | None = None) -> list[str]:
    """What the published rows say about how far to trust a prediction for this model on this backend (empty: nothing
    beyond the cross-validated figures). moe_measured: whether silicon timed this MoE shape on the planned GPU, precision
    and TP (None: it depends on the candidate, as in a search); attention_dp: planned with attention data parallelism;
    moe_carried: (planned GPU, donor GPU) where the shape's timing was carried over from another GPU's measurement."""
    latent = [_LATENT_ATTENTION] if model.latent_attention else []
    if not model.moe_layer_count:
        return latent
    caveats = latent + _moe_caveats(model, backend, efficiency, moe_measured, attention_dp)
    return caveats + [_carried_caveat(*moe_carried)] if moe_carried else caveats


def layout_caveats(model: ModelSpec, tp: int, attention_dp: bool) -> list[str]:
    """What the plan's layout costs it: a latent KV cache held whole on every GPU of a TP group without attention data
    parallelism."""
    return [_LATENT_TP.format(tp=tp)] if model.latent_attention and tp > 1 and not attention_dp else []


def _moe_caveats(model: ModelSpec, backend: str, efficiency: Efficiency, moe_measured: bool | None,
                 attention_dp: bool) -> list[str]:
    if attention_dp:
        return [_PYTORCH_DEP] + ([_PYTORCH_MOE_UNMEASURED.format(where=" at this expert parallelism on this GPU and precision")]
                                 if moe_measured is False else [])
    if backend == "tensorrt":
        return [_ENGINE_MOE.format(share=efficiency.moe_expert_compute)]
    if model.expert_weights == "mxfp4":  # and where silicon did not time its experts on this GPU, what that costs too
        return [_PYTORCH_MXFP4] + ([_PYTORCH_MOE_UNMEASURED.format(where=" on this GPU, precision and TP")]
                                   if moe_measured is False else [])
    if not efficiency.moe_measured or moe_measured is False:
        return [_PYTORCH_MOE_UNMEASURED.format(where=" on this GPU, precision and TP" if efficiency.moe_measured else "")]
    if moe_measured:
        return [_PYTORCH_MOE_MEASURED]
    return [_PYTORCH_MOE_MEASURED + " (a candidate's GPU that silicon did not time the shape on takes another GPU's "
            "timing of it, scaled by the shapes both were timed on; where no GPU timed it, the dense GEMM rate, which put "
            "those rows +48% and +36% fast)"]


# How carrying an MoE shape's timing over from another GPU fares, held out shape by shape from NVIDIA's table
# (moe_timing.held_out_errors, scripts/moe_transfer_check.py): per GPU, median and 90th-percentile |error| %. Asserted
# against that check in tests/unit/planner/test_moe_timing.py.
CARRIED_OVER_ERROR = {"a100-80gb": (14.4, 31.4), "b200": (2.2, 27.4), "gb200": (2.3, 31.1), "h100-sxm": (5.6, 18.0),
                      "h200": (6.2, 20.0), "l40s": (17.7, 53.9), "rtx-pro-6000": (17.1, 74.3)}
_PYTORCH_MOE_CARRIED = ("mixture of experts: silicon timed this MoE shape on {donor} but not on {gpu}; its experts take "
                        "{donor}'s measurement, scaled by how {gpu} ran the shapes measured on both{figures}")


def _carried_caveat(gpu: str, donor: str) -> str:
    median, p90 = CARRIED_OVER_ERROR.get(gpu, (None, None))
    figures = (f" (held out shape by shape from NVIDIA's table, that lands {median:.1f}% from silicon on {gpu} in the "
               f"median, {p90:.0f}% at the 90th percentile)") if median is not None else ""
    return _PYTORCH_MOE_CARRIED.format(gpu=gpu, donor=donor, figures=figures)


# What the published rows on GPUs no fit saw say (scripts/plan_vs_more_models.py "GPUs outside the fit"; asserted against
# that report in tests/unit/planner/test_published.py). Keyed by (backend, GPU).
_GPU_OUTSIDE_FIT = {
    ("pytorch", "gb200"): ("{gpu}: no fit saw this GPU; NVIDIA's published PyTorch-backend rows on it came out, for dense models "
                           "(Llama 3.3 70B, Llama 3.1 405B), 2.1% and 2.5% off in the median (14% and 12% worst){moe}"),
    ("pytorch", "rtx-pro-6000"): ("{gpu}: no fit saw this GPU; NVIDIA's published one-GPU PyTorch-backend rows on it (Llama 3.3 70B, "
                                  "Qwen3-30B-A3B) came out 8.6% and 3.1% off in the median, 28% and 16% at worst: Llama 3.3 70B "
                                  "ran faster than planned on 12 of its 13 rows; calibrate from your own bench "
                                  "(pipeline plan --calibrate)"),
    ("tensorrt", "gh200"): ("{gpu}: no fit saw this GPU; NVIDIA's published TensorRT 0.17 engine rows on it (FP8, TP 1; never fitted) came "
                            "out, for dense models (Llama 3.1 8B and 70B, Mistral 7B), 6.5% off in the median and 12% at worst, 21 of "
                            "26 faster than planned, and Mixtral 8x7B 9.1% (21% worst); that page says its GH200 runs may have used "
                            "the legacy gptManagerBenchmark harness. Planned as the 96 GB HBM3 GH200 those pages name (the 144 GB "
                            "HBM3e one holds more KV cache): calibrate from your own bench (pipeline plan --calibrate)"),
    ("pytorch", "gh200"): ("{gpu}: no fit saw this GPU; NVIDIA's published PyTorch-backend rows on it (TensorRT-LLM 0.21, Llama 3.1 "
                           "8B FP8, TP 1; never fitted) came out 4.3% off in the median, 12% at worst. Planned as the 96 GB HBM3 "
                           "GH200 that page names (the 144 GB HBM3e one holds more KV cache)"),
}
_GB200_MOE = ("; for MoE models (Qwen3-30B-A3B, Llama 4 Scout) 33% and 37%, mostly fast: those runs published as little as "
              "0.61x B200's figures for the same rows, below what the GPU's figures allow; treat MoE throughput on it as an "
              "upper bound")
_GPU_UNCHECKED = ("{gpu}: no figure NVIDIA published for {what} on this GPU checks the prediction; it rests on the GPU's "
                  "datasheet figures (pipeline/data/gpus.json) and constants fitted on other GPUs: calibrate from your own "
                  "bench (pipeline plan --calibrate)")


def gpu_caveats(gpu: str, backend: str, *, moe: bool = False) -> list[str]:
    """What the published rows say about predictions on this GPU with this backend: nothing where a fit saw its rows; the
    never-fitted figures where NVIDIA published rows no fit saw; else that nothing published checks it. The CPU has none
    (pipeline bench measures it)."""
    if gpu == "cpu":
        return []
    if (backend, gpu) in _GPU_OUTSIDE_FIT:
        return [_GPU_OUTSIDE_FIT[(backend, gpu)].format(gpu=gpu, moe=_GB200_MOE if moe else "")]
    if gpu in {r["gpu"] for r in published_rows(backend)}:
        return []
    return [_GPU_UNCHECKED.format(gpu=gpu, what="TensorRT engines" if backend == "tensorrt" else "the PyTorch backend")]


# What NVIDIA's 0.20 runs say of PyTorch-backend predictions bound by TP's all-reduce, a regime no row of that backend's
# fit is in (scripts/plan_vs_earlier_release.py; asserted against that report in tests/unit/planner/test_earlier_release.py).
_PYTORCH_ALL_REDUCE = ("TP's all-reduce bounds this prediction, and no published run the PyTorch backend's constants were "
                       "fitted on is so bound; TensorRT-LLM 0.20's published runs that are (Llama 3.3 70B at TP 4 and 8 on B200 "
                       "and TP 8 on H100 and H200, Llama 3.1 405B at TP 8 on B200; never fitted) came out 8.1% fast in the "
                       "median, 17% at worst (that release's runs of configurations the fit saw: +2.0% on average): treat the "
                       "throughput as an upper bound, or calibrate from your own bench (pipeline plan --calibrate)")


def bound_caveats(backend: str, bound: str | None) -> list[str]:
    """What the published rows say of a prediction dominated by `bound` (ThroughputEstimate.bound) on this backend."""
    return [_PYTORCH_ALL_REDUCE] if backend == "pytorch" and bound == "TP all-reduce" else []


# What NVIDIA's published NIM serving runs say of a TTFT p50 bound (scripts/plan_vs_nim.py; asserted against that report in
# tests/unit/planner/test_nim_serving.py).
_TTFT_P50 = ("a ttft_p50_ms bound is checked against the predicted p50 TTFT (one prompt's prefill and its wait behind the "
             "other clients' prompts); NVIDIA's published NIM serving runs of a TensorRT-LLM engine (Llama 3.3 70B FP8 on 2x "
             "H100, 5000/500 at 5-50 clients; never fitted) measured mean TTFTs of 1.2-1.3x that prediction, while their TPOT "
             "and tokens/s came within 3.2% and 4.3% of it: bound TTFT with ttft_p99_ms (its prediction covered every "
             "published mean TTFT of more than one client), or calibrate from your own bench (pipeline plan --calibrate)")


# What NVIDIA's silicon-measured serving runs say of the PyTorch backend's TPOT (scripts/plan_vs_silicon_serving.py, and
# held out by scripts/plan_vs_published.py --cv; asserted against those in tests/unit/planner/test_serving_sample.py and
# test_published.py).
_PYTORCH_TPOT = ("TPOT on the PyTorch backend: serving NVIDIA measured on silicon (AIConfigurator's sample, 4-128 concurrent "
                 "requests) is in this backend's fit at a tenth of the weight; with the GPU or the model held out, the rows "
                 "came out 13.8% and 12.4% off in the median, and a model added after the fit (Llama 3.1 8B in BF16 on H100, "
                 "never fitted) 8.9% (AIConfigurator 6.9%). Shipped, Llama 3.1 70B on B200 and H200 (a release the "
                 "sample does not name, run in October 2025) +5% at 4 requests and +5% at 128 (+4% on average; "
                 "AIConfigurator +25%), but Qwen3 32B FP8 on H100 (TensorRT-LLM 1.0.0rc3) -4% at 8 and -17% at 128 (-14%; "
                 "AIConfigurator +0.4%): on an older release expect a higher TPOT than predicted at many requests; "
                 "calibrate from your own bench (pipeline plan --calibrate)")


def slo_caveats(slo_keys: set[str], gpus: set[str], backend: str = "tensorrt") -> list[str]:
    """What the published and silicon-measured serving runs say of an SLO search over these keys on these GPUs (the CPU's
    are measured here)."""
    return (([_TTFT_P50] if "ttft_p50_ms" in slo_keys and gpus - {"cpu"} else [])
            + (tpot_caveats(backend, gpus) if slo_keys & {"tpot_p50_ms", "tpot_p99_ms"} else []))


def tpot_caveats(backend: str, gpus: set[str]) -> list[str]:
    """What the silicon-measured serving runs say of a TPOT predicted for this backend on these GPUs."""
    return [_PYTORCH_TPOT] if backend == "pytorch" and gpus - {"cpu"} else []


# What NVIDIA's published runs with pipeline stages say (scripts/plan_vs_pp.py; asserted against that report in
# tests/unit/planner/test_stages.py).
_PIPELINE = ("pipeline stages: NVIDIA's published runs with them (RTX PRO 6000, TensorRT-LLM 1.0 and 1.2-dev, PyTorch backend; "
             "never fitted) came out 8.4% off in the median and 37% at worst for dense models, and the gain over the same "
             "run with one stage 4.5% / 17%; MoE models with attention data parallelism 14% / 52%, mostly fast")
_PIPELINE_ENGINES = "; no published engine run with stages checks TensorRT engines, planned the same way"


def pp_caveats(pp: int, backend: str) -> list[str]:
    """What the published runs with pipeline stages say of a plan with `pp` of them on this backend."""
    return [_PIPELINE + (_PIPELINE_ENGINES if backend == "tensorrt" else "")] if pp > 1 else []

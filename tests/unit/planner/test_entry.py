"""`pipeline plan` (pipeline.planner.entry): the whole plan, what fits instead, the CLI refusals and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.cli import run
from pipeline.core.errors import UnsupportedError

from planner_cases import LLAMA_8B, write_config


def test_70b_fp16_does_not_fit_one_h100_and_the_plan_says_what_would(tmp_path: Path, capsys) -> None:
    shapes = json.loads((LLAMA_8B / "config.json").read_text())
    shapes.update(hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, intermediate_size=28672)
    config = write_config(tmp_path, **shapes)
    result = P.plan(P.PlanSpec(model=config, gpu="h100", quant="fp16", isl=1024, osl=1024))
    assert not result.fits and result.prediction is None
    options = {(a.tp, a.quant) for a in result.alternatives}
    assert (2, "fp16") in options and (1, "fp8") in options
    code = run(["plan", "--model", str(config), "--gpu", "h100", "--quant", "fp16", "--isl", "1024", "--osl", "1024"])
    assert code == 2
    assert "--tp 2 --quant fp16" in capsys.readouterr().err
    assert P.plan(P.PlanSpec(model=config, gpu="h100", quant="fp16", tp=2, isl=1024, osl=1024)).fits
    with pytest.raises(UnsupportedError, match="no room") as refused:  # what the build stage gets
        P.recommend_build(P.Scenario(config, "h100", "fp16", None, 1, 1024, 1024), "throughput")
    assert "--tp 2 --quant fp16" in refused.value.hint


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "v100"], "Unknown GPU"),
        (["--gpu", "a100", "--quant", "fp8"], "cannot run fp8"),
        (["--gpu", "a100", "--kv-cache", "fp8"], "cannot run a fp8 KV cache"),
        (["--gpu", "h100", "--tp", "3"], "does not divide"),
        (["--gpu", "h100", "--quant", "int8_sq", "--backend", "pytorch"], "the PyTorch backend deploys"),
        (["--gpu", "h100", "--quant", "fp8", "--kv-cache", "int8", "--backend", "pytorch"], "not fp8 with KV int8"),
        (["--gpu", "h100", "--quant", "nvfp4", "--backend", "pytorch"], "cannot run nvfp4"),
        (["--gpu", "h100", "--goal", "fastest"], "Unknown goal"),
        (["--gpu", "h100", "--isl", "130000", "--osl", "2000"], "context window"),
    ],
)
def test_cli_refusals_exit_2(args: list[str], message: str, capsys) -> None:
    assert run(["plan", "--model", str(LLAMA_8B), *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_json(capsys) -> None:
    code = run(["plan", "--model", str(LLAMA_8B), "--gpu", "h200", "--quant", "fp8", "--kv-cache", "fp8",
                "--isl", "2048", "--osl", "256", "--concurrency", "8", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["gpu"] == "h200" and data["kv_cache"] == "fp8"
    assert data["prediction"]["batch"] == 8 and data["prediction"]["ttft_ms"] > 0
    assert data["max_throughput"]["output_tokens_per_s"] > data["prediction"]["output_tokens_per_s"]
    assert data["memory"]["kv_bytes_per_token"] == 65536
    assert set(data["constants"]) == set(P.EFFICIENCY.as_dict())
    # 8B at TP 1 runs 32 query and 8 KV heads per rank: H200's silicon figure for that shape with an FP8 cache
    from pipeline.planner.rates import kv_read_fraction

    assert data["constants"]["kv_bandwidth_efficiency"] == round(kv_read_fraction("h200", 1, 128, 32, 8), 3)


@pytest.mark.slow
def test_plan_for_the_demo_model(demo_hf_dir: Path, capsys) -> None:
    assert run(["plan", "--model", str(demo_hf_dir), "--gpu", "l4", "--quant", "fp16", "--isl", "512",
                "--osl", "128", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["tied_embeddings"] is True
    assert data["model"]["params_b"] == pytest.approx(0.1345, abs=0.001)


def test_plan_predicts_speculation_from_an_acceptance_rate_and_says_whether_to_enable_it(capsys) -> None:
    """`pipeline plan --speculative-acceptance`: the planner's speculation curve up to the build's batch, its
    break-even, and the call at the asked concurrency (issue #24: the planner recommends it or not for the SLO)."""
    from pipeline.planner.entry import SpeculationInput
    from pipeline.planner.speculation import SpeculationModel, break_even, speculation_point

    spec = P.PlanSpec(model=LLAMA_8B, gpu="h100", quant="fp8", isl=128, osl=128, concurrency=4,
                      speculation=SpeculationInput(acceptance=0.7, max_draft_len=4, tpot_slo_ms=20))
    result = P.plan(spec)
    plan = result.speculation
    assert plan is not None and plan.enable and plan.tokens_per_step == pytest.approx(2.773, abs=1e-3)
    levels = [p.concurrency for p in plan.points]
    assert levels[0] == 1 and levels[-1] <= result.build["max_batch_size"] and 4 in levels
    scenario = P.Scenario(LLAMA_8B, "h100", "fp8", None, 1, 128, 128)
    assert plan.points[0] == speculation_point(scenario, SpeculationModel(0.7, 4), 1)
    assert plan.break_even_concurrency == break_even(plan.points)
    never = P.plan(spec.model_copy(update={"speculation": SpeculationInput(acceptance=0.0)})).speculation
    assert never is not None and not never.enable and never.break_even_concurrency == 1
    assert run(["plan", "--model", str(LLAMA_8B), "--gpu", "h100", "--speculative-acceptance", "1.5"]) == 2
    assert "--speculative-acceptance" in capsys.readouterr().err


def test_one_configuration_on_the_pytorch_backend_is_planned_with_its_own_constants(capsys) -> None:
    """--backend pytorch without --slo: the LLM API's constants and its default KV fraction (0.9), as the SLO search and
    `pipeline build --backend pytorch` use them; the table names LLM-API options, not trtllm-build flags."""
    from pipeline.planner.rates import PYTORCH_EFFICIENCY

    common = ["plan", "--model", str(LLAMA_8B), "--gpu", "h200", "--quant", "fp8", "--kv-cache", "fp8", "--isl", "1024",
              "--osl", "1024"]
    assert run([*common, "--backend", "pytorch", "--json"]) == 0
    pytorch = json.loads(capsys.readouterr().out)
    assert run([*common, "--json"]) == 0
    engine = json.loads(capsys.readouterr().out)
    assert pytorch["backend"] == "pytorch" and engine["backend"] == "tensorrt"
    assert pytorch["constants"]["bandwidth_efficiency"] == PYTORCH_EFFICIENCY.bandwidth
    assert pytorch["constants"]["step_overhead_per_layer_us"] == round(PYTORCH_EFFICIENCY.step_overhead_per_layer_s * 1e6, 3)
    assert pytorch["build"]["kv_cache_free_gpu_mem_fraction"] == P.DEFAULT_KV_FRACTION
    assert engine["build"]["kv_cache_free_gpu_mem_fraction"] == 0.95
    assert pytorch["prediction"]["tpot_ms"] != engine["prediction"]["tpot_ms"]
    assert run([*common, "--backend", "pytorch"]) == 0
    assert "kv_cache_config.free_gpu_memory_fraction 0.9" in capsys.readouterr().out


def test_the_cpu_is_planned_with_this_hosts_figures_and_the_reference_runtimes_batch(capsys) -> None:
    """--gpu cpu: the reference runtime as `pipeline build --gpu cpu` builds it (batch 16 for throughput, 4 for
    latency), at the rates measured on this host (planner/cpu.py), as the SLO search plans it."""
    from pipeline.planner.cpu import cpu_target

    assert run(["plan", "--model", str(LLAMA_8B), "--gpu", "cpu", "--isl", "128", "--osl", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu"] == "cpu" and data["build"]["max_batch_size"] == 16 and data["max_throughput"]["batch"] == 16
    assert data["memory"]["gpu_memory_gib"] == pytest.approx(cpu_target().memory_gib, abs=0.01)
    assert run(["plan", "--model", str(LLAMA_8B), "--gpu", "cpu", "--goal", "latency", "--isl", "128", "--osl", "32",
                "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["build"]["max_batch_size"] == 4


def test_the_engine_architectures_are_trtllm_builds_and_cover_what_convert_builds() -> None:
    """data/trtllm_engine_architectures.tsv is MODEL_MAP of the stored tensorrt_llm/models/__init__.py, and every
    architecture the pipeline's convert stage takes to trtllm-build is in it."""
    from pipeline.convert import NOT_EXPORTABLE, SUPPORTED_ARCHITECTURES
    from pipeline.core.gpus import get_gpu
    from pipeline.data import packaged_fact_rows
    from pipeline.planner.slo import engine_flow_refusal

    rows = packaged_fact_rows("trtllm_engine_architectures.tsv")
    assert {(r["repo"], r["commit"], r["file"]) for r in rows} == {
        ("NVIDIA/TensorRT-LLM", "02267d3d4fd886c3ad036f6580beb0847eac6e4b", "tensorrt_llm/models/__init__.py")}
    names = {r["architecture"] for r in rows}
    assert set(SUPPORTED_ARCHITECTURES) | set(NOT_EXPORTABLE) <= names
    assert {"Qwen3ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM"} <= names
    assert not {"GptOssForCausalLM", "Qwen3MoeForCausalLM", "Llama4ForConditionalGeneration", "DeepseekV3ForCausalLM"} & names
    gpt_oss = P.published_model("gpt-oss-20b")
    assert gpt_oss.architecture == "GptOssForCausalLM"
    h100, cpu = get_gpu("h100"), get_gpu("cpu")
    assert "GptOssForCausalLM" in engine_flow_refusal(gpt_oss, "tensorrt", h100)
    assert engine_flow_refusal(gpt_oss, "pytorch", h100) is None and engine_flow_refusal(gpt_oss, "tensorrt", cpu) is None
    assert engine_flow_refusal(P.published_model("mixtral-8x7b"), "tensorrt", h100) is None
    assert engine_flow_refusal(P.published_model("mixtral-8x7b").model_copy(update={"architecture": None}), "tensorrt", h100) is None


def test_plan_predicts_trtllm_bench_as_the_published_comparison_does() -> None:
    """--trtllm-bench-requests: the same prediction make plan-check compares with NVIDIA's published figures (its own
    limits at the pages' KV fraction 0.95, their request count), and trtllm-bench's default fraction 0.90 otherwise."""
    from pipeline.core.errors import UnsupportedError as Unsupported
    from pipeline.planner.entry import PlanSpec, plan
    from pipeline.planner.published import bench_requests, compare_published, published_rows

    for backend, model in (("tensorrt", "llama-3.1-8b"), ("pytorch", "llama-3.3-70b")):
        row = next(r for r in published_rows(backend) if r["model"] == model and r["gpu"] == "h200" and r["isl"] == "500")
        requests = bench_requests(row["trtllm_version"], 500, int(row["osl"]))
        config = Path(P.__file__).parents[1] / "data" / "published_models" / f"{model}.json"
        spec = PlanSpec(model=config, gpu="h200", quant="fp8", kv_cache="fp8", tp=int(row["tp"]), isl=500, osl=int(row["osl"]),
                        backend=backend, trtllm_bench_requests=requests, kv_cache_free_gpu_mem_fraction=0.95)
        bench = plan(spec).trtllm_bench
        assert bench is not None and bench.requests == requests == 3000
        assert bench.output_tokens_per_s == compare_published(None, [row])[0]["predicted_tokens_per_s"]
        default = plan(spec.model_copy(update={"kv_cache_free_gpu_mem_fraction": None})).trtllm_bench
        assert default.kv_cache_free_gpu_mem_fraction == 0.9 and default.max_batch_size <= bench.max_batch_size
    with pytest.raises(Unsupported, match="trtllm-bench runs on a GPU"):
        plan(PlanSpec(model=LLAMA_8B, gpu="cpu", isl=32, osl=8, trtllm_bench_requests=100))


def test_what_would_fit_is_what_the_backend_deploys_and_the_cpu_is_one_process() -> None:
    """The alternatives a plan names (and its exit-2 hint) are builds the planned backend deploys: no INT8 weight-only
    for the PyTorch backend, no TP on the CPU, whose reference runtime `pipeline build --gpu cpu` builds at TP 1 only."""
    from pipeline.core.errors import UnsupportedError as Unsupported
    from pipeline.core.gpus import get_gpu
    from pipeline.planner.entry import PlanSpec, plan
    from pipeline.planner.slo import backend_refusal

    mixtral = Path(P.__file__).parents[1] / "data" / "published_models" / "mixtral-8x7b.json"
    engines = {a.quant for a in plan(PlanSpec(model=mixtral, gpu="h100", quant="fp16")).alternatives}
    pytorch = plan(PlanSpec(model=mixtral, gpu="h100", quant="fp16", backend="pytorch")).alternatives
    assert "int8_wo" in engines and "int8_wo" not in {a.quant for a in pytorch} and pytorch
    assert not any(backend_refusal("pytorch", get_gpu("h100"), a.quant, a.kv_cache) for a in pytorch)
    on_cpu = plan(PlanSpec(model=mixtral, gpu="cpu", quant="fp16"))
    assert not on_cpu.fits and all(a.tp == 1 for a in on_cpu.alternatives)
    with pytest.raises(Unsupported, match="one CPU process"):
        plan(PlanSpec(model=LLAMA_8B, gpu="cpu", tp=2, isl=64, osl=16))

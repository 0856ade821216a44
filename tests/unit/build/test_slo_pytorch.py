"""`pipeline build --backend pytorch --slo ...`: the SLO search (run for the PyTorch backend) chooses the deployable's
LLM-API max_batch_size, max_num_tokens and kv_cache_config.free_gpu_memory_fraction, the manifest records `slo_plan`,
the Triton LLM-API model.yaml carries the options, and bench reads the plan back beside what it measures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.bench.deployment import deployment, planned_beside_measured
from pipeline.build import BuildSpec, build_engine, plan_build
from pipeline.build.llm_args import class_fields, option_problems, top_level_fields
from pipeline.cli import run
from pipeline.core.artifacts import read_manifest
from pipeline.core.deployable import OPTIONS_FILE
from pipeline.planner.prices import load_prices
from pipeline.planner.search import SearchSpec, search
from pipeline.planner.slo import parse_slo

from build_cases import build_root, make_hf_checkpoint  # noqa: F401  (build_root: a fixture)

SLO = "ttft_p99_ms=500,tpot_p99_ms=40"
CPU_SLO = "ttft_p99_ms=60000,tpot_p99_ms=10000"  # loose: the tiny model on this CPU meets it at any batch


def _expected(ckpt: Path, gpu: str, slo: str, isl: int, osl: int):
    return search(SearchSpec(model=ckpt, slo=parse_slo(slo), isl=isl, osl=osl, gpus=(gpu,), quants=("fp16",),
                             kv_caches=("auto",), tps=(1,), backend="pytorch"), load_prices()).best_per_gpu[0]


def test_a_pytorch_slo_build_takes_the_searchs_choice_into_its_options(build_root: Path) -> None:
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    plan = plan_build(BuildSpec(backend="pytorch", gpu="h100", checkpoint=ckpt, slo=SLO, slo_isl=2048, slo_osl=256))
    expected = _expected(ckpt, "h100", SLO, 2048, 256)
    options = plan.options
    assert (options["max_batch_size"], options["max_num_tokens"]) == (expected.max_batch_size, expected.max_num_tokens)
    assert options["kv_cache_config"]["free_gpu_memory_fraction"] == expected.kv_cache_free_gpu_mem_fraction
    assert options["max_seq_len"] == 2304 and options["cuda_graph_config"]["batch_sizes"][-1] == expected.max_batch_size
    assert "SLO search" in plan.why["max_batch_size"] and "SLO search" in plan.why["kv_cache_config.free_gpu_memory_fraction"]
    record = plan.slo_plan
    assert record["slo"] == parse_slo(SLO).bounds and record["backend"] == "pytorch"
    assert record["prediction"] == expected.latency.model_dump() and record["concurrency"] == expected.concurrency
    # the keys written are TorchLlmArgs / KvCacheConfig fields of TensorRT-LLM 1.1.0 (pipeline/data/trtllm_llm_args.tsv)
    assert option_problems(options) == [] and {"max_batch_size", "max_num_tokens", "kv_cache_config"} <= set(top_level_fields())
    assert class_fields("KvCacheConfig")["free_gpu_memory_fraction"].type == "Optional[float]"
    plain = plan_build(BuildSpec(backend="pytorch", gpu="h100", checkpoint=ckpt))
    assert plain.slo_plan is None and plain.inputs_hash != plan.inputs_hash


def test_the_search_predicts_the_pytorch_backend_with_its_own_constants(build_root: Path) -> None:
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    engine = search(SearchSpec(model=ckpt, slo=parse_slo(SLO), isl=2048, osl=256, gpus=("h100",), quants=("fp16",),
                               kv_caches=("auto",), tps=(1,), batch_sizes=(8,)), load_prices()).best_per_gpu[0]
    torch = search(SearchSpec(model=ckpt, slo=parse_slo(SLO), isl=2048, osl=256, gpus=("h100",), quants=("fp16",),
                              kv_caches=("auto",), tps=(1,), batch_sizes=(8,), backend="pytorch"), load_prices()).best_per_gpu[0]
    # PYTORCH_EFFICIENCY's per-iteration overhead is larger than the engines' (planner/rates.py)
    assert torch.latency.tpot_p50_ms > engine.latency.tpot_p50_ms
    # the deployable's KV fraction (TensorRT-LLM's default, kept for CUDA graphs), not the engine's throughput 0.95
    assert (torch.kv_cache_free_gpu_mem_fraction, engine.kv_cache_free_gpu_mem_fraction) == (0.9, 0.95)


def test_bench_predicts_a_pytorch_deployment_with_the_backends_constants(build_root: Path) -> None:
    """planned_beside_measured predicts a GPU deployable as the search that chose its build did (PyTorch constants)."""
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    dep = {"model": "tiny", "gpu": "h100-sxm", "backend": "pytorch", "quant": "fp16", "kv_cache": "auto", "tp": 1,
           "max_batch_size": 8, "max_num_tokens": 2048, "kv_cache_free_gpu_mem_fraction": 0.9, "engine_dir": str(ckpt),
           "slo_plan": {"slo": parse_slo(SLO).bounds}}
    level = {"load": "c1", "concurrency": 1, "completed": 4, "isl": {"mean": 2048}, "osl": {"mean": 256},
             "ttft_ms": {"p50": 10.0, "p99": 12.0}, "tpot_ms": {"p50": 5.0, "p99": 6.0}}
    (torch,) = planned_beside_measured(dep, [level])
    (engine,) = planned_beside_measured({**dep, "backend": "tensorrt"}, [level])
    assert torch["predicted"]["tpot_p50_ms"] > engine["predicted"]["tpot_p50_ms"]


@pytest.fixture()
def cpu_deployable(build_root: Path) -> Path:
    """A CPU PyTorch-backend deployable built for an SLO (the reference runtime serves it)."""
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    return build_engine(BuildSpec(backend="pytorch", gpu="cpu", checkpoint=ckpt, slo=CPU_SLO, slo_isl=32, slo_osl=8)).deploy_dir


def test_the_deployable_records_the_plan_and_its_bundle_carries_the_options(cpu_deployable: Path, tmp_path: Path) -> None:
    from pipeline.render import RenderSpec, render

    manifest = read_manifest(cpu_deployable)
    plan = manifest["slo_plan"]
    options = yaml.safe_load((cpu_deployable / OPTIONS_FILE).read_text())
    assert manifest["options"] == options
    assert (options["max_batch_size"], options["max_num_tokens"]) == (plan["max_batch_size"], plan["max_num_tokens"])
    assert options["kv_cache_config"]["free_gpu_memory_fraction"] == plan["kv_cache_free_gpu_mem_fraction"]
    repo = render(RenderSpec(engine=cpu_deployable, out=tmp_path / "repo")).repo
    model_yaml = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert model_yaml["max_batch_size"] == plan["max_batch_size"] and model_yaml["max_num_tokens"] == plan["max_num_tokens"]
    assert model_yaml["kv_cache_config"]["free_gpu_memory_fraction"] == plan["kv_cache_free_gpu_mem_fraction"]
    # bench, given the bundle's model/ as --tokenizer, finds the deployment and its SLO plan
    dep = deployment(repo / "tensorrt_llm" / "1" / "model")
    assert dep is not None and dep["backend"] == "pytorch" and dep["slo_plan"] == plan
    assert dep["max_batch_size"] == plan["max_batch_size"]
    level = {"load": "c1", "concurrency": 1, "completed": 4, "isl": {"mean": 32}, "osl": {"mean": 8},
             "ttft_ms": {"p50": 10.0, "p99": 12.0}, "tpot_ms": {"p50": 5.0, "p99": 6.0}}
    (row,) = planned_beside_measured(dep, [level])
    assert row["measured"]["ttft_p99_ms"] == 12.0 and set(row["predicted"]) == set(row["measured"])
    assert row["slo"] == plan["slo"] and row["slo_measured_pass"] is True


@pytest.mark.parametrize("args", [
    ["--slo", SLO],  # no --isl / --osl
    ["--slo", "ttft_p95_ms=500", "--isl", "2048", "--osl", "256"],  # no such SLO key
    ["--slo", "tpot_p99_ms=0.01", "--isl", "2048", "--osl", "256"],  # nothing meets it
])
def test_bad_slo_input_exits_2(build_root: Path, args: list[str], capsys) -> None:
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    assert run(["build", "--backend", "pytorch", "--gpu", "h100", "--checkpoint", str(ckpt), "--dry-run", *args]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_pipeline_engine_plans_a_pytorch_build_for_the_slo(build_root: Path) -> None:
    """`pipeline engine --backend pytorch --slo ...` (`make engine SLO=... BACKEND=pytorch`): its plan takes the choice."""
    from pipeline.jobs import EngineJobSpec, run_engine_job

    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    result = run_engine_job(EngineJobSpec(source=str(ckpt), gpu="h100", backend="pytorch", quant="fp16", dry_run=True,
                                          slo=SLO, isl=2048, osl=256))
    expected = _expected(ckpt, "h100", SLO, 2048, 256)
    assert f"max_batch_size {expected.max_batch_size}, max_num_tokens {expected.max_num_tokens}, max_seq_len 2304" \
        in result.steps[-1].detail


def test_the_dry_run_prints_the_slo_plan(build_root: Path, capsys) -> None:
    ckpt = make_hf_checkpoint(build_root / "tiny" / "checkpoints" / "hf-fp16")
    assert run(["build", "--backend", "pytorch", "--gpu", "h100", "--checkpoint", str(ckpt), "--dry-run",
                "--slo", SLO, "--isl", "2048", "--osl", "256"]) == 0
    expected = _expected(ckpt, "h100", SLO, 2048, 256)
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("slo ")]
    assert f"max_batch_size {expected.max_batch_size}, max_num_tokens {expected.max_num_tokens}, KV fraction 0.9" in line
    assert f"predicted at concurrency {expected.concurrency}" in line

"""Attention data parallelism with the experts spread over the same GPUs (Scenario.attention_dp; NVIDIA's "DEP"): each GPU
holds the whole attention and its own requests' KV cache and schedules its own batch; the MoE layers see every GPU's
tokens, each GPU running 1/tp of the experts, timed on silicon at that expert parallelism (data/trtllm_moe_latency.tsv
moe_ep); NCCL's all-gather and reduce-scatter around each MoE layer (data/nccl_collective_latency.tsv) replace TP's
all-reduces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.cli import run
from pipeline.core.errors import InvalidInputError
from pipeline.data import packaged_fact_rows
from pipeline.planner.memory import routed_expert_bytes, weight_bytes
from pipeline.planner.comm import measured_collective_s

QWEN = P.published_model("qwen3-235b-a22b")
MODELS = Path(P.__file__).resolve().parents[1] / "data" / "published_models"


def _dep(tp: int = 4, gpu: str = "b200", quant: str = "nvfp4") -> P.Scenario:
    return P.Scenario(QWEN, gpu, quant, "fp8", tp, 1024, 1024, attention_dp=True)


def test_memory_is_one_gpus_whole_attention_and_its_share_of_the_experts() -> None:
    dep, tp4 = _dep(), _dep().replace(attention_dp=False)
    experts = routed_expert_bytes(QWEN, "nvfp4")
    assert P.weight_bytes_per_gpu(QWEN, "nvfp4", 4, True) == int(weight_bytes(QWEN, "nvfp4") - experts * 3 / 4)
    assert P.weight_bytes_per_gpu(QWEN, "nvfp4", 4, True) > P.weight_bytes_per_gpu(QWEN, "nvfp4", 4)
    dep_memory, tp_memory = (P.memory_plan(s, max_num_tokens=8192, max_batch_size=512) for s in (dep, tp4))
    assert dep_memory.kv_bytes_per_token == P.kv_bytes_per_token(QWEN, "fp8", 1)  # every KV head, for its own requests
    assert dep_memory.kv_bytes_per_token == 4 * tp_memory.kv_bytes_per_token  # 4 KV heads: one per GPU under TP 4


def test_the_experts_take_silicons_timing_at_that_expert_parallelism() -> None:
    dep = _dep()
    row = next(r for r in packaged_fact_rows("trtllm_moe_latency.tsv")
               if (r["gpu"], r["dtype"], r["hidden_size"], r["inter_size"], r["num_experts"], r["moe_tp"], r["moe_ep"])
               == ("b200", "nvfp4", "4096", "1536", "128", "1", "4"))
    tokens, latency_us = int(row["tokens"].split(",")[10]), float(row["latency_us"].split(",")[10])
    assert P.measured_moe_s(dep.gpu, dep.quant, QWEN, 4, tokens, expert_parallel=True) == pytest.approx(latency_us * 1e-6)
    expert_tp = P.measured_moe_s(dep.gpu, dep.quant, QWEN, 4, tokens)
    assert expert_tp is not None and expert_tp != pytest.approx(latency_us * 1e-6)  # the other layout's row


def test_an_iteration_is_one_gpus_load_with_every_gpus_tokens_at_the_experts() -> None:
    eff = P.efficiency_for("pytorch")
    dep = _dep()
    load = P.StepLoad(decode=200, decode_context=1500, prefill_tokens=1024, prefill_context=512)
    step = P.step_time(dep, load, eff)
    alone = P.step_time(dep.replace(tp=1, attention_dp=False), load, eff)  # the same rank's attention, whole
    assert step.decode_attention_s == pytest.approx(alone.decode_attention_s)
    assert step.context_attention_s == pytest.approx(alone.context_attention_s)
    assert step.overhead_s == pytest.approx(alone.overhead_s)
    tokens = 4 * 1224  # every GPU's: gathered as NVFP4 (half a byte and a scale per 16) with 8 ids and weights each,
    gather = measured_collective_s(dep.gpu, "all_gather", 4, tokens * (QWEN.hidden_size * (0.5 + 1 / 16) + 8 * 8), "int8")
    scatter = measured_collective_s(dep.gpu, "reduce_scatter", 4, tokens * QWEN.hidden_size)  # 16-bit outputs scattered
    assert step.allreduce_s == pytest.approx(QWEN.moe_layer_count * (gather + scatter))
    h200 = _dep(gpu="h200", quant="fp8")  # FP8 activations: one byte each
    fp8 = P.step_time(h200, load, eff)
    assert fp8.allreduce_s == pytest.approx(QWEN.moe_layer_count * (
        measured_collective_s(h200.gpu, "all_gather", 4, tokens * (QWEN.hidden_size + 8 * 8), "int8")
        + measured_collective_s(h200.gpu, "reduce_scatter", 4, tokens * QWEN.hidden_size)))
    assert measured_collective_s(_dep(gpu="l4", quant="fp8").gpu, "all_gather", 4, 1e6) is None  # no NCCL figures there
    experts = P.measured_moe_s(dep.gpu, dep.quant, QWEN, 4, 4 * 1224, expert_parallel=True)
    assert step.gemm_s > QWEN.moe_layer_count * experts  # the experts of all four GPUs' tokens, and the rank's dense GEMMs



def test_a_lone_prompt_meets_one_dummy_token_from_each_idle_gpu_at_the_experts() -> None:
    """TTFT of a request alone: the other GPUs have nothing to run but the one-token dummy request PyExecutor pads an
    idle attention-DP rank with, so the experts see the prompt's chunk and three tokens, not four chunks."""
    eff = P.efficiency_for("pytorch")
    dep = _dep()
    build = {"max_num_tokens": 8192}
    chunk = dict(decode=0, decode_context=0, prefill_tokens=1024, prefill_context=512, logits_tokens=1)
    lone = P.step_time(dep, P.StepLoad(**chunk, peer_tokens=3), eff)
    assert P.prefill_time(dep, build["max_num_tokens"], eff) == pytest.approx(lone.total_s)
    busy = P.step_time(dep, P.StepLoad(**chunk), eff)  # every GPU prefilling a prompt at once
    assert lone.gemm_s < busy.gemm_s and lone.allreduce_s < busy.allreduce_s
    experts = P.measured_moe_s(dep.gpu, dep.quant, QWEN, 4, 1024 + 3, expert_parallel=True)
    dense = P.step_time(dep.replace(tp=1, attention_dp=False), P.StepLoad(**chunk), eff)  # no experts split, no exchange
    assert lone.gemm_s > QWEN.moe_layer_count * experts and lone.total_s > dense.overhead_s
    assert P.predict(dep, 1, build={**P.recommend_build(dep, "latency"), **build}, efficiency=eff).ttft_ms == pytest.approx(
        lone.total_s * 1e3, rel=1e-3)
    tp = dep.replace(attention_dp=False)  # without attention DP nothing changes: the experts see this GPU's tokens
    balanced, alone = (P.step_time(tp, P.StepLoad(**chunk, peer_tokens=peers), eff) for peers in (None, 0))
    assert alone.total_s == pytest.approx(balanced.total_s)

def test_a_run_is_served_by_each_gpu_for_its_share_of_the_requests() -> None:
    eff = P.efficiency_for("pytorch")
    dep = _dep()
    build = {"max_batch_size": 64, "max_num_tokens": 4096, "kv_cache_free_gpu_mem_fraction": 0.9, "chunked_prefill": False}
    run_ = P.max_throughput(dep, build=build, efficiency=eff, requests=1000)
    assert run_.batch == 4 * 64  # each GPU's in-flight limit, four GPUs
    one_each = P.max_throughput(dep, build=build, efficiency=eff, requests=4)
    assert one_each.batch == 4  # one request per GPU
    closed = P.predict(dep, 256, build=build, efficiency=eff)
    assert closed.batch == 4 * 64 and closed.output_tokens_per_s > P.predict(dep, 4, build=build, efficiency=eff).output_tokens_per_s


@pytest.mark.parametrize(("model", "tp", "expected"), [
    ("llama-3.1-8b", 2, "has none"),  # dense: nothing to spread
    ("qwen3-235b-a22b", 1, "at least 2"),
    ("qwen3-235b-a22b", 3, "divide them"),
])
def test_refused_where_there_are_no_experts_to_spread_evenly(model: str, tp: int, expected: str) -> None:
    with pytest.raises(InvalidInputError, match=expected):
        P.Scenario(P.published_model(model), "h200", "fp8", "fp8", tp, 1024, 128, attention_dp=True).check()


def test_plan_cli(capsys) -> None:
    config = str(MODELS / "qwen3-235b-a22b.json")
    base = ["plan", "--model", config, "--gpu", "b200", "--quant", "nvfp4", "--kv-cache", "fp8", "--tp", "4"]
    assert run([*base, "--backend", "pytorch", "--attention-dp", "--trtllm-bench-requests", "3000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["attention_dp"] is True and data["memory"]["weights_gib"] > 30
    assert data["trtllm_bench"]["output_tokens_per_s"] > 0
    assert any(c.startswith("attention data parallelism (DEP)") for c in data["caveats"])
    from pipeline.cli.plan import _table

    cells = _table(P.PlanResult(**data)).columns[1]._cells  # what the table prints, before the terminal wraps it
    assert any("enable_attention_dp true, moe_expert_parallel_size 4" in cell for cell in cells)
    assert any("(DEP4): memory, sequences and limits per GPU" in cell for cell in cells)
    for refused, why in (([*base, "--attention-dp"], "PyTorch backend"),
                         ([*base, "--attention-dp", "--slo", "tpot_p99_ms=50"], "PyTorch backend"),
                         (["plan", "--model", str(MODELS / "llama-3.1-8b.json"), "--gpu", "h100", "--tp", "2", "--backend",
                           "pytorch", "--attention-dp"], "has none")):
        assert run(refused) == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err


def test_dep_table_names_its_source_and_its_models_their_shapes() -> None:
    rows = P.dep_rows()
    assert len(rows) == 55 and {r["attention_dp"] for r in rows} == {"true"}
    first = {"gpt-oss-120b": 121, "llama-4-maverick": 188, "qwen3-235b-a22b": 205}  # the 1.2-dev page's tables
    for r in rows:
        assert r["commit"] == "03e27c7d5ff0c6e89f8328838c0a8e64f1b34f9d" and r["published_unit"] == "per_gpu"
        assert r["tokens_per_s"] == str(int(r["published_value"]) * int(r["tp"]))
        line = int(r["line"])
        if r["gpu"] == "rtx-pro-6000":  # the RTX 6000 Pro tables' PP 1 DEP columns
            assert line in {"qwen3-235b-a22b": range(224, 228), "qwen3-30b-a3b": range(258, 263)}[r["model"]]
        else:
            assert first[r["model"]] <= line < first[r["model"]] + 6
    for model, count in (("qwen3-235b-a22b", 235.1e9), ("llama-4-maverick", 400.7e9)):  # "235B", "400B"
        assert P.published_model(model).param_count == pytest.approx(count, rel=0.005)


def test_a_dep_deployments_bench_is_calibrated_as_dep(tmp_path: Path) -> None:
    """bench records the profile's attention_dp in its deployment, and calibration predicts that deployment as DEP: each
    GPU's prompts burst at once for p99, not all GPUs' prompts on one."""
    from pipeline.bench.deployment import deployment
    from pipeline.planner.slo import _burst, latency

    engine = tmp_path / "engine"
    (engine / "tokenizer").mkdir(parents=True)
    profile = {"model": "qwen", "gpu": "b200", "quant": "nvfp4", "kv_cache": "fp8", "tp": 4, "attention_dp": True,
               "max_batch_size": 64, "max_num_tokens": 4096, "backend": "pytorch"}
    (engine / "manifest.json").write_text(json.dumps({"stage": "build", "profile": profile}))
    assert deployment(engine / "tokenizer")["attention_dp"] is True
    build = {"max_batch_size": 64, "max_num_tokens": 4096, "kv_cache_free_gpu_mem_fraction": 0.9, "max_input_len": 1024,
             "max_seq_len": 2048}
    eff = P.efficiency_for("pytorch")
    dep = latency(_dep(), 64, build, eff)  # 16 clients per GPU, all in flight: p99 TTFT is one GPU's burst of 16 prompts
    assert dep.batch == 64
    assert dep.ttft_p99_ms == pytest.approx(sum(_burst(_dep(), 16, build, eff)) * 1e3, rel=1e-3)
    assert dep.ttft_p99_ms < sum(_burst(_dep(), 64, build, eff)) * 1e3


def test_nccl_table_names_its_source_and_every_gpu_of_the_allreduce_table() -> None:
    rows = packaged_fact_rows("nccl_collective_latency.tsv")
    allreduce_gpus = {r["gpu"] for r in packaged_fact_rows("trtllm_allreduce_latency.tsv")}
    assert {r["gpu"] for r in rows} == allreduce_gpus
    assert {(r["op"], r["dtype"]) for r in rows} == {(op, dtype) for op in ("all_gather", "reduce_scatter")
                                                     for dtype in ("half", "int8")}
    for r in rows:
        assert r["source"] == f"systems/data/{r['system']}/comm/nccl/{r['nccl_version']}/nccl_perf.parquet"
        sizes, latency = ([float(v) for v in r[k].split(",")] for k in ("message_elements", "latency_us"))
        assert sizes == sorted(sizes) and len(sizes) == len(latency) and min(latency) > 0


def test_the_slo_search_weighs_dep_beside_tp_and_the_build_takes_its_choice(tmp_path: Path) -> None:
    """An MoE on the PyTorch backend is searched with and without attention data parallelism at each TP its experts
    divide by; --attention-dp searches DEP only; limits of a DEP candidate are each GPU's, its concurrency all GPUs'."""
    from pipeline.planner.search import SearchSpec, search
    from pipeline.planner.slo import parse_slo

    config = MODELS / "qwen3-235b-a22b.json"
    spec = SearchSpec(model=config, slo=parse_slo("tpot_p99_ms=200"), isl=1024, osl=1024, gpus=("b200",), quants=("nvfp4",),
                      kv_caches=("fp8",), tps=(4,), backend="pytorch", batch_sizes=(16, 64))
    both = search(spec, {})
    layouts = {c.attention_dp for c in both.pareto} | {c.attention_dp for c in both.best_per_gpu}
    assert both.feasible >= 2 and any(c.startswith("attention data parallelism (DEP)") for c in both.caveats)
    dep_only = search(spec.model_copy(update={"attention_dp": (True,)}), {})
    tp_only = search(spec.model_copy(update={"attention_dp": (False,)}), {})
    assert dep_only.feasible + tp_only.feasible == both.feasible and layouts <= {True, False}
    best = dep_only.best_per_gpu[0]
    assert best.attention_dp and best.label().startswith("DEP4 b200") and "per GPU" in best.label()
    assert best.concurrency > best.max_batch_size  # every GPU's batch in flight
    assert not any(c.attention_dp for c in tp_only.pareto)
    dense = search(spec.model_copy(update={"model": MODELS / "llama-3.1-8b.json", "quants": ("fp8",), "tps": (2,)}), {})
    assert not any(c.attention_dp for c in dense.pareto)  # nothing to spread: TP only


def test_what_would_fit_instead_keeps_dep_and_splits_the_experts() -> None:
    """A DEP scenario that does not fit is offered larger DEP sizes its experts divide by (Qwen3-235B in BF16 on 2x H100)."""
    from pipeline.planner.memory import alternatives

    tight = P.Scenario(QWEN, "h100", "bf16", "auto", 2, 1024, 1024, attention_dp=True)
    assert not P.memory_plan(tight).fits
    larger = [a for a in alternatives(tight) if a.quant == "bf16"]
    assert larger and all((a.tp > 2 and QWEN.num_experts % a.tp == 0) or a.pp > 1 for a in larger)

"""A quantized checkpoint is planned as it is stored: checkpoint.checkpoint_precision reads what it declares (ModelOpt's
hf_quant_config.json first, then config.json's quantization_config, as TensorRT-LLM's PyTorch backend reads them),
GPT-OSS's MXFP4 experts are sized and timed as MXFP4, and `pipeline plan` refuses a --quant the weights are not in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.cli import run
from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import get_gpu
from pipeline.core.quant import quant_format
from pipeline.planner.memory import GIB, weight_bytes
from pipeline.planner.published import bench_param_count
from pipeline.planner.moe_timing import measured_moe_s, mxfp4_moe_dtype
from pipeline.planner.scenario import stored_precision
from pipeline.planner.checkpoint import checkpoint_precision

from planner_cases import LLAMA_8B

LLAMA = json.loads((LLAMA_8B / "config.json").read_text(encoding="utf-8"))


def _checkpoint(tmp_path: Path, quantization_config: dict | None = None, hf_quant: dict | None = None) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir(parents=True, exist_ok=True)
    config = {**LLAMA, **({"quantization_config": quantization_config} if quantization_config else {})}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if hf_quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(hf_quant), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
         {"checkpoint_quant": "fp8", "checkpoint_kv_cache": "fp8"}),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": None}, {"checkpoint_quant": "nvfp4", "checkpoint_kv_cache": None}),
        ({"quant_method": "modelopt", "quant_algo": "W4A16_AWQ"}, {"checkpoint_quant": "int4_awq", "checkpoint_kv_cache": None}),
        ({"quant_method": "modelopt", "quant_algo": "fp8_pb_wo"}, {"checkpoint_quant": "fp8", "checkpoint_kv_cache": None}),
        ({"quant_method": "modelopt", "quant_algo": None, "kv_cache_quant_algo": "FP8"}, {"checkpoint_quant": "bf16", "checkpoint_kv_cache": "fp8"}),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, {"checkpoint_quant": "fp8"}),  # DeepSeek / Qwen FP8
        ({"quant_method": "mxfp4"}, {"checkpoint_quant": "bf16", "expert_weights": "mxfp4"}),  # GPT-OSS
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, {"checkpoint_quant": "int4_awq"}),
        ({"quant_method": "compressed-tensors"}, {"unread_quantization": "quant_method compressed-tensors"}),
        ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, {"unread_quantization": "ModelOpt quant_algo MIXED_PRECISION, kv_cache_quant_algo None"}),
    ],
)
def test_what_a_checkpoint_declares(config: dict, expected: dict) -> None:
    assert checkpoint_precision({"quantization_config": config}) == expected
    assert checkpoint_precision({}) == checkpoint_precision({"quantization_config": {}}) == {}


def test_a_tensorrt_llm_checkpoint_names_its_quant_algo() -> None:
    """`pipeline convert --format trtllm` writes TensorRT-LLM's config.json: QuantAlgo values under `quantization`."""
    engine = {"quantization": {"quant_algo": "W4A16", "kv_cache_quant_algo": "INT8"}}
    assert checkpoint_precision(engine) == {"checkpoint_quant": "int4_wo", "checkpoint_kv_cache": "int8"}
    assert checkpoint_precision({"quantization": {"quant_algo": None, "kv_cache_quant_algo": None}}) == {
        "checkpoint_quant": "bf16", "checkpoint_kv_cache": None}


def test_hf_quant_config_json_is_read_before_config_json(tmp_path: Path) -> None:
    """ModelOpt's export (and `pipeline convert --format hf`) writes hf_quant_config.json; TensorRT-LLM reads it first."""
    folder = _checkpoint(tmp_path, {"quant_method": "fp8"}, {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}})
    model = P.model_spec_from_config(folder)
    assert (model.checkpoint_quant, model.checkpoint_kv_cache) == ("nvfp4", "fp8")
    assert P.model_spec_from_config(folder / "config.json") == model
    (folder / "hf_quant_config.json").write_text("{", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="hf_quant_config.json"):
        P.model_spec_from_config(folder)


def test_a_quantized_checkpoint_is_planned_as_stored() -> None:
    fp8 = P.ModelSpec(**{**P.model_spec_from_config(LLAMA_8B).model_dump(), "checkpoint_quant": "fp8"})
    assert stored_precision(fp8, None) == "fp8" and stored_precision(fp8, "FP8") == "fp8"
    with pytest.raises(InvalidInputError, match="stored as fp8") as refused:
        stored_precision(fp8, "fp16")
    assert "--quant fp8" in refused.value.hint
    plain = P.model_spec_from_config(LLAMA_8B)
    assert stored_precision(plain, None) == "fp16" and stored_precision(plain, "int4_awq") == "int4_awq"
    mxfp4 = P.published_model("gpt-oss-20b")
    assert stored_precision(mxfp4, "fp16") == "fp16"  # its 16-bit layers: fp16 and bf16 stand for each other
    with pytest.raises(InvalidInputError, match="bf16 with MXFP4 experts"):
        stored_precision(mxfp4, "fp8")
    kv_only = P.ModelSpec(**{**plain.model_dump(), "checkpoint_quant": "bf16", "checkpoint_kv_cache": "fp8"})
    assert stored_precision(kv_only, None) == "bf16" and stored_precision(kv_only, "fp8") == "fp8"  # 16-bit weights: a what-if
    unread = P.ModelSpec(**{**plain.model_dump(), "unread_quantization": "quant_method compressed-tensors"})
    with pytest.raises(InvalidInputError, match="compressed-tensors"):
        stored_precision(unread, None)
    assert stored_precision(unread, "fp8") == "fp8"


def test_gpt_oss_weights_are_mxfp4_experts_and_16_bit_rest() -> None:
    """OpenAI's model card: gpt-oss-20b runs in 16 GB, gpt-oss-120b on one 80 GB GPU (MXFP4 experts)."""
    small, large = P.published_model("gpt-oss-20b"), P.published_model("gpt-oss-120b")
    assert weight_bytes(small, "bf16") / GIB == pytest.approx(12.8, abs=0.1)
    assert weight_bytes(large, "bf16") / GIB == pytest.approx(60.7, abs=0.1)
    plain = P.ModelSpec(**{**small.model_dump(), "expert_weights": None})  # the same shapes read as 16-bit
    assert weight_bytes(plain, "bf16") / GIB == pytest.approx(38.9, abs=0.1)
    # trtllm-bench counts the elements its safetensors hold: two FP4 weights a byte, one UE8 scale per 32
    experts = small.routed_expert_params
    assert bench_param_count(small) == pytest.approx(small.param_count - experts + experts * (1 / 2 + 1 / 32))
    assert bench_param_count(plain) == bench_param_count(plain, "fp8") == plain.param_count  # FP8: one element a weight
    llama = P.published_model("llama-3.3-70b")  # NVIDIA's NVFP4 checkpoint: two weights a byte, an FP8 scale per 16
    linear = llama.num_layers * llama.matmul_params_per_layer
    assert bench_param_count(llama, "nvfp4") == pytest.approx(llama.param_count - linear * (1 - 1 / 2 - 1 / 16))


def test_mxfp4_experts_take_silicon_timings_of_the_kind_tensorrt_llm_runs() -> None:
    """get_mxfp4_quant_algo: MXFP8 activations from SM 100 (CUTLASS MoE), 16-bit below; silicon timed GPT-OSS's shape."""
    assert [mxfp4_moe_dtype(get_gpu(g)) for g in ("h100", "h200", "b200", "gb200")] == [
        "w4a16_mxfp4", "w4a16_mxfp4", "w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8"]
    model, bf16 = P.published_model("gpt-oss-20b"), quant_format("bf16")
    for gpu in ("h100", "h200", "b200", "gb200"):
        assert measured_moe_s(get_gpu(gpu), bf16, model, 1, 1024) is not None, gpu
    plain = P.ModelSpec(**{**model.model_dump(), "expert_weights": None})
    assert measured_moe_s(get_gpu("h200"), bf16, plain, 1, 1024) is None  # no BF16 timing of that shape
    assert measured_moe_s(get_gpu("a100"), bf16, model, 1, 1024) is None  # nor any MXFP4 one on A100


def test_an_mxfp4_plan_says_how_far_to_trust_it() -> None:
    from pipeline.planner.entry import PlanSpec, plan

    folder = Path(P.__file__).parents[1] / "data" / "published_models" / "gpt-oss-20b.json"
    timed = plan(PlanSpec(model=folder, gpu="h200", backend="pytorch", isl=1024, osl=1024))
    assert timed.quant == "bf16" and timed.model["expert_weights"] == "mxfp4"
    assert len(timed.caveats) == 2 and timed.caveats[0].startswith("MXFP4 experts (GPT-OSS)")
    assert timed.caveats[1].startswith("TPOT on the PyTorch backend")
    untimed = plan(PlanSpec(model=folder, gpu="a100", backend="pytorch", isl=1024, osl=1024))
    assert untimed.caveats[0] == timed.caveats[0] and "no silicon timing of this MoE shape on this GPU" in untimed.caveats[1]


def test_plan_cli_takes_the_checkpoints_precision_and_refuses_another(tmp_path: Path, capsys) -> None:
    folder = _checkpoint(tmp_path, hf_quant={"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}})
    assert run(["plan", "--model", str(folder), "--gpu", "h100", "--backend", "pytorch", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["quant"], data["kv_cache"], data["model"]["checkpoint_quant"]) == ("fp8", "fp8", "fp8")
    assert run(["plan", "--model", str(folder), "--gpu", "h100", "--quant", "fp16"]) == 2
    err = capsys.readouterr().err
    assert "stored as fp8" in err and "Leave --quant out" in err and "Traceback" not in err
    assert run(["plan", "--model", str(folder), "--slo", "tpot_p99_ms=50", "--gpus", "h100", "--quant", "fp8,int4_awq",
                "--out", str(tmp_path / "plan")]) == 2
    assert "stored as fp8" in capsys.readouterr().err
    unread = _checkpoint(tmp_path / "other", {"quant_method": "compressed-tensors"})
    assert run(["plan", "--model", str(unread), "--gpu", "h100"]) == 2
    assert "does not read" in capsys.readouterr().err


def test_search_of_a_quantized_checkpoint_searches_its_precision_only(tmp_path: Path) -> None:
    from pipeline.planner.search import SearchSpec, search
    from pipeline.planner.slo import parse_slo

    folder = _checkpoint(tmp_path, hf_quant={"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}})
    found = search(SearchSpec(model=folder, slo=parse_slo("tpot_p99_ms=60"), isl=1024, osl=128, gpus=("h100",), tps=(1,)), {})
    assert {c.quant for c in found.pareto} == {"fp8"}

"""A quantized checkpoint that leaves some linear layers unquantized (ModelOpt's exclude_modules) is planned with those
layers in 16-bit: their weights take 16 bits each and their GEMMs run at the 16-bit rate. NVIDIA's NVFP4 DeepSeek R1
0528 v2 leaves the attention's query and KV projections so (its model card: v2 additionally quantizes the attention's wo;
AIConfigurator 0.12.0's models/helpers.py: the first NVFP4 DeepSeek R1 0528 excludes the whole self_attn block)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import planner as P
from pipeline.planner.checkpoint import excluded_module_globs, sixteen_bit_linear_params
from pipeline.planner.memory import weight_bytes, weight_bytes_per_gpu
from pipeline.planner.published import shipped_config
from pipeline.planner.stages import pipeline_stage
from pipeline.planner.step import StepLoad, step_work

from planner_cases import LLAMA_8B

DEEPSEEK = json.loads(shipped_config("deepseek-r1").read_text(encoding="utf-8"))
LLAMA = json.loads((LLAMA_8B / "config.json").read_text(encoding="utf-8"))
QUERY_AND_KV = ["model.layers.*.self_attn.q_a_proj", "model.layers.*.self_attn.q_b_proj",
                "model.layers.*.self_attn.kv_a_proj_with_mqa", "model.layers.*.self_attn.kv_b_proj"]
# DeepSeek-V3's projections, by hand: q_a 7168x1536, q_b 1536x(128x192), kv_a 7168x(512+64), kv_b 512x(128x(128+128))
QUERY_AND_KV_PER_LAYER = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
O_PROJ_PER_LAYER = 128 * 128 * 7168


def _checkpoint(tmp_path: Path, config: dict, quantization: dict) -> P.ModelSpec:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": quantization}), encoding="utf-8")
    return P.model_spec_from_config(folder)


def test_nvidias_nvfp4_deepseek_keeps_its_query_and_kv_projections_16_bit(tmp_path: Path) -> None:
    nvfp4 = {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16}
    excluded = _checkpoint(tmp_path, DEEPSEEK, {**nvfp4, "exclude_modules": ["lm_head", *QUERY_AND_KV, "model.layers.61*"]})
    assert excluded.checkpoint_quant == "nvfp4"
    assert excluded.sixteen_bit_params == 61 * QUERY_AND_KV_PER_LAYER  # the MTP layer (61) and lm_head add nothing
    plain = excluded.model_copy(update={"sixteen_bit_params": 0})
    extra_bits = 16 - (4 + 8 / 16)  # a weight in 16-bit instead of NVFP4 with its FP8 scale per 16
    assert weight_bytes(excluded, "nvfp4") - weight_bytes(plain, "nvfp4") == pytest.approx(
        61 * QUERY_AND_KV_PER_LAYER * extra_bits / 8, abs=1)
    # under attention data parallelism every GPU holds the whole attention, so each carries all of the difference
    assert weight_bytes_per_gpu(excluded, "nvfp4", 4, True) - weight_bytes_per_gpu(plain, "nvfp4", 4, True) == pytest.approx(
        61 * QUERY_AND_KV_PER_LAYER * extra_bits / 8, abs=1)
    # a pipeline stage holds its layers' share of them (the fullest of 4 stages: 16 of the 61 layers)
    assert pipeline_stage(excluded, 4).sixteen_bit_params == 16 * QUERY_AND_KV_PER_LAYER
    # the whole block (the first NVFP4 release) adds each layer's output projection
    whole = sixteen_bit_linear_params(excluded, ("model.layers.*.self_attn*",))
    assert whole == 61 * (QUERY_AND_KV_PER_LAYER + O_PROJ_PER_LAYER)


def test_the_16_bit_layers_gemms_run_at_the_16_bit_rate(tmp_path: Path) -> None:
    model = _checkpoint(tmp_path, DEEPSEEK, {"quant_algo": "NVFP4", "exclude_modules": QUERY_AND_KV})
    plain = model.model_copy(update={"sixteen_bit_params": 0})
    load = StepLoad(decode=0, decode_context=0, prefill_tokens=8192, prefill_context=4096)
    work, before = (step_work(P.Scenario(m, "b200", "nvfp4", "fp8", tp=4, attention_dp=True), load) for m in (model, plain))
    moved = 2 * model.sixteen_bit_params * 8192
    assert work.dense_param_tokens == pytest.approx(before.dense_param_tokens - moved / 2)
    assert work.sixteen_bit_flops == pytest.approx(before.sixteen_bit_flops + moved)
    assert work.time(P.EFFICIENCY).gemm_s > before.time(P.EFFICIENCY).gemm_s


@pytest.mark.parametrize(("globs", "expected_per_layer"), [
    (["lm_head"], 0),
    (["*self_attn*"], 4096 * 4096 * 2 + 4096 * 1024 * 2),  # q and o 4096x4096, k and v 4096x1024
    (["language_model.model.layers.*.self_attn.o_proj"], 4096 * 4096),  # a multimodal checkpoint's names
    (["model.layers.0.mlp*"], None),  # one layer's MLP
    (["model.layers.*.self_attn"], 4096 * 4096 * 2 + 4096 * 1024 * 2),  # the parent module: its projections are stored so
])
def test_globs_are_matched_as_tensorrt_llm_matches_module_names(tmp_path: Path, globs: list[str], expected_per_layer) -> None:
    model = _checkpoint(tmp_path, LLAMA, {"quant_algo": "FP8", "exclude_modules": globs})
    if expected_per_layer is None:
        assert model.sixteen_bit_params == 3 * 4096 * 14336
    else:
        assert model.sixteen_bit_params == 32 * expected_per_layer


def test_only_a_quantized_checkpoint_has_16_bit_layers() -> None:
    ignore = {"ignore": ["*self_attn*"], "modules_to_not_convert": ["lm_head"], "exclude_modules": ["*mlp*"]}
    assert excluded_module_globs({"quantization_config": ignore}) == ("*mlp*", "*self_attn*", "lm_head")
    assert excluded_module_globs({}) == excluded_module_globs({"quantization_config": "fp8"}) == ()
    # GPT-OSS lists its attention (model.layers.*.self_attn) as not converted: its 16-bit layers are 16-bit already
    gpt_oss = P.published_model("gpt-oss-20b")
    assert "model.layers.*.self_attn" in excluded_module_globs(json.loads(shipped_config("gpt-oss-20b").read_text(encoding="utf-8")))
    assert gpt_oss.checkpoint_quant == "bf16" and gpt_oss.sixteen_bit_params == 0
    kv_only = P.model_spec_from_dict({**LLAMA, "quantization_config": {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8",
                                                                         "exclude_modules": ["*self_attn*"]}}, "kv-only")
    assert kv_only.checkpoint_quant == "bf16" and kv_only.sixteen_bit_params == 0

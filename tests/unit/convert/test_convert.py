"""`pipeline convert` refusals: each one before any work, with a specific message and exit code 2.

These run on small hand-made checkpoint folders (a real config.json and a real, tiny safetensors
file): planning reads only the config, so nothing is loaded and nothing is written under build/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.convert import ConvertSpec, checkpoint_id, plan_convert
from pipeline.quantization.modelopt import choose_awq_block
from pipeline.core.errors import UnsupportedError

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "num_hidden_layers": 30,
    "head_dim": 64,
    "vocab_size": 49152,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
}


def make_checkpoint(folder: Path, **overrides: object) -> Path:
    from safetensors.torch import save_file
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    config = {**LLAMA, **overrides}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({"model.norm.weight": torch.ones(4)}, str(folder / "model.safetensors"))
    return folder


@pytest.fixture()
def smol_like(tmp_path: Path) -> Path:
    """A folder shaped like SmolLM2-135M: 9 attention heads, 3 KV heads, hidden 576."""
    return make_checkpoint(tmp_path / "smol-like")


def refuse(capsys: pytest.CaptureFixture[str], build_root: Path, argv: list[str], *needles: str) -> str:
    code = run(["convert", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in:\n{err}"
    assert "Traceback" not in err
    assert not build_root.exists() or not any(build_root.rglob("checkpoints")), "a refusal wrote something"
    return err


def test_unknown_gpu_lists_the_valid_keys(capsys, build_root, smol_like) -> None:
    refuse(capsys, build_root, ["--model", str(smol_like), "--quant", "fp8", "--gpu", "x100"],
           "Unknown GPU 'x100'", "Valid GPU keys:", "h100-sxm", "a100-80gb", "cpu")


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--quant", "fp8", "--gpu", "a100"], ["a100-80gb (SM 8.0) cannot run fp8", "On a100-80gb use one of:", "int8_sq", "h100-sxm"]),
        (["--quant", "int8_sq", "--kv-cache", "fp8", "--gpu", "a10g"], ["a10g (SM 8.6) cannot run a fp8 KV cache", "--kv-cache auto or int8"]),
        (["--quant", "nvfp4", "--gpu", "h100"], ["h100-sxm (SM 9.0) cannot run nvfp4", "10.0", "b200"]),
    ],
)
def test_precision_the_gpu_cannot_run(capsys, build_root, smol_like, argv, needles) -> None:
    refuse(capsys, build_root, ["--model", str(smol_like), *argv], *needles)


def test_tp_must_divide_attention_heads(capsys, build_root, smol_like) -> None:
    # The demo shape: 9 heads and 3 KV heads, so tp=3 is the only tp>1 that splits it.
    refuse(capsys, build_root, ["--model", str(smol_like), "--quant", "fp16", "--tp", "2"],
           "--tp 2 does not divide the model's 9 attention heads", "divides both", "1, 3")


def test_tp_must_divide_kv_heads(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "gqa", num_attention_heads=8, num_key_value_heads=2, head_dim=72)
    refuse(capsys, build_root, ["--model", str(folder), "--tp", "4"],
           "--tp 4 does not divide the model's 2 KV heads", "1, 2")


def test_pp_beyond_the_layer_count(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "shallow", num_hidden_layers=2)
    refuse(capsys, build_root, ["--model", str(folder), "--pp", "3"], "--pp 3 is more than the model's 2 layers")


@pytest.mark.parametrize(
    "overrides, shown",
    [
        ({"architectures": ["BertForMaskedLM"], "model_type": "bert"}, "Architecture BertForMaskedLM"),
        ({"architectures": ["MambaForCausalLM"], "model_type": "mamba"}, "Architecture MambaForCausalLM"),
        ({"architectures": None, "model_type": "t5"}, "Architecture (none; model_type 't5')"),
    ],
)
def test_unsupported_architecture(capsys, build_root, tmp_path, overrides, shown) -> None:
    folder = make_checkpoint(tmp_path / "other", **overrides)
    refuse(capsys, build_root, ["--model", str(folder)], shown, "not supported", "Supported: LlamaForCausalLM")


@pytest.mark.parametrize("arch, model_type, reason", [
    ("MixtralForCausalLM", "mixtral", "fused MoE experts"),
    ("Gemma2ForCausalLM", "gemma2", "refuses the TensorRT-LLM checkpoint export"),
    ("Phi3ForCausalLM", "phi3", "refuses the TensorRT-LLM checkpoint export"),
])
def test_architectures_modelopt_cannot_export_are_refused_with_the_reason(capsys, build_root, tmp_path, arch, model_type, reason) -> None:
    folder = make_checkpoint(tmp_path / model_type, architectures=[arch], model_type=model_type)
    refuse(capsys, build_root, ["--model", str(folder), "--quant", "fp8"], f"Architecture {arch}", "cannot be converted here",
           reason, "Supported: LlamaForCausalLM")


def test_rope_scaling_tensorrt_llm_has_no_kernel_for_is_refused_by_key(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "odd-rope", rope_parameters={"rope_theta": 10000.0, "rope_type": "ntk-by-parts", "factor": 2.0})
    refuse(capsys, build_root, ["--model", str(folder), "--quant", "fp8"], "rotary_scaling.type", '"ntk-by-parts"',
           "llama3", "RotaryScalingType.from_string")


def test_rope_base_the_two_transformers_generations_read_differently_is_refused(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "two-bases", rope_theta=10000.0)  # rope_parameters says 100000
    refuse(capsys, build_root, ["--model", str(folder), "--quant", "fp8"], "rope_theta 10000.0",
           "rope_parameters.rope_theta 100000.0", "two different RoPE bases")


def test_qwen2_without_its_model_type_cannot_get_a_qwen_type(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "qwen-odd", architectures=["Qwen2ForCausalLM"], model_type="qwen2_5_omni")
    refuse(capsys, build_root, ["--model", str(folder), "--quant", "fp8"], "qwen_type", '"qwen2_5_omni"', "qwen2_moe")


def test_architecture_from_model_type_when_architectures_is_missing(build_root, tmp_path) -> None:
    # Checkpoints written from GGUF carry model_type only; llama must still be accepted.
    folder = make_checkpoint(tmp_path / "from-gguf", architectures=None)
    assert plan_convert(ConvertSpec(model=str(folder))).decoder_type == "llama"


def test_missing_checkpoint(capsys, build_root, tmp_path) -> None:
    refuse(capsys, build_root, ["--model", str(tmp_path / "does-not-exist")], "Path not found")


def test_folder_without_weights(capsys, build_root, tmp_path) -> None:
    folder = tmp_path / "no-weights"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA), encoding="utf-8")
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 16)
    refuse(capsys, build_root, ["--model", str(folder)], "has no *.safetensors weights", "pytorch_model.bin")


def test_unreadable_weights_and_config(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "truncated")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:20])
    refuse(capsys, build_root, ["--model", str(folder)], "is not a readable safetensors file")

    folder = make_checkpoint(tmp_path / "bad-config")
    (folder / "config.json").write_text("{not json", encoding="utf-8")
    refuse(capsys, build_root, ["--model", str(folder)], "Cannot read", "config.json")


def test_empty_calibration_file(capsys, build_root, smol_like, tmp_path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    refuse(capsys, build_root, ["--model", str(smol_like), "--quant", "fp8", "--calib-data", str(empty)],
           f"Calibration data {empty} holds no text samples")


def test_dtype_that_contradicts_the_format(capsys, build_root, smol_like) -> None:
    refuse(capsys, build_root, ["--model", str(smol_like), "--quant", "fp16", "--dtype", "bfloat16"],
           "--quant fp16 means float16 weights", "--quant bf16")
    refuse(capsys, build_root, ["--model", str(smol_like), "--quant", "fp8", "--dtype", "fp32"], "--dtype: Input should be 'float16' or 'bfloat16' (got 'fp32')")


def test_unknown_formats(capsys, build_root, smol_like) -> None:
    refuse(capsys, build_root, ["--model", str(smol_like), "--quant", "int3"], "Unknown quantization format 'int3'", "int4_awq")
    refuse(capsys, build_root, ["--model", str(smol_like), "--kv-cache", "fp4"], "Unknown KV-cache format 'fp4'")


def test_awq_block_size_choice() -> None:
    smol = {"q_proj": 576, "o_proj": 576, "down_proj": 1536}
    assert choose_awq_block(smol) == 64  # SmolLM2: 576 = 4.5 x 128
    assert choose_awq_block({"q_proj": 4096, "o_proj": 4096, "down_proj": 11008}) == 128
    assert choose_awq_block(smol, tp=3) == 64  # o_proj 192, down_proj 512 per rank
    with pytest.raises(UnsupportedError, match="in-features 96"):
        choose_awq_block({"q_proj": 96, "o_proj": 96})
    with pytest.raises(UnsupportedError, match="at tp=2"):
        choose_awq_block({"q_proj": 256, "o_proj": 64, "down_proj": 512}, tp=2)  # o_proj 32 per rank


def test_awq_refused_before_loading(capsys, build_root, tmp_path) -> None:
    folder = make_checkpoint(tmp_path / "odd", hidden_size=480, head_dim=48, num_attention_heads=10,
                             num_key_value_heads=10, intermediate_size=1280)
    refuse(capsys, build_root, ["--model", str(folder), "--quant", "int4_awq"], "INT4 AWQ needs every quantized in-feature",
           "480")


def test_checkpoint_id_is_readable_and_hashed(build_root, smol_like) -> None:
    assert checkpoint_id("fp8", "fp8", 1, 1, "abcdef0123456789") == "fp8-kvfp8-tp1-abcdef01"
    assert checkpoint_id("int4_awq", "auto", 2, 2, "0" * 64) == "int4_awq-tp2-pp2-00000000"
    one = plan_convert(ConvertSpec(model=str(smol_like), quant="fp8", kv_cache="fp8", calib_size=8))
    again = plan_convert(ConvertSpec(model=str(smol_like), quant="fp8", kv_cache="fp8", calib_size=8))
    other = plan_convert(ConvertSpec(model=str(smol_like), quant="fp8", kv_cache="fp8", calib_size=9))
    assert one.ckpt_id == again.ckpt_id and one.ckpt_id.startswith("fp8-kvfp8-tp1-")
    assert other.ckpt_id != one.ckpt_id, "a different calibration set must make a different checkpoint"
    assert one.out == build_root.resolve() / "smol-like" / "checkpoints" / one.ckpt_id
    assert one.inputs["calibration"]["sha256"] == one.calibration.sha256


# ----------------------------------------------------------------------------------------------
# --format hf (ModelOpt unified HF checkpoint for TensorRT-LLM's PyTorch backend)


@pytest.mark.parametrize("argv, needles", [
    (["--quant", "int8_sq"], ["--format hf cannot carry --quant int8_sq", "fp16, bf16, fp8, nvfp4, int4_awq, w4a8_awq",
                              "--format trtllm for int8_sq"]),
    (["--quant", "int8_wo"], ["--format hf cannot carry --quant int8_wo", "--format trtllm for int8_wo"]),
    (["--quant", "int4_wo"], ["--format hf cannot carry --quant int4_wo", "int4_awq"]),
    (["--quant", "fp8", "--kv-cache", "int8"], ["--format hf cannot carry a int8 KV cache", "--kv-cache fp8",
                                                "--format trtllm for a int8 KV cache"]),
    (["--quant", "fp16", "--tp", "3"], ["--format hf writes one unsharded checkpoint; --tp 3 --pp 1",
                                        "`pipeline build --backend pytorch`"]),
    (["--quant", "fp8", "--pp", "2"], ["--tp 1 --pp 2", "shards the checkpoint when it loads it"]),
])
def test_hf_format_refuses_what_the_pytorch_backend_cannot_load(capsys, build_root, smol_like, argv, needles) -> None:
    refuse(capsys, build_root, ["--model", str(smol_like), "--format", "hf", *argv], *needles)


def test_unknown_checkpoint_format(capsys, build_root, smol_like) -> None:
    refuse(capsys, build_root, ["--model", str(smol_like), "--format", "gguf"], "Unknown --format 'gguf'",
           "--format trtllm", "--format hf")


def test_hf_refusals_come_before_the_source_is_read(capsys, build_root, tmp_path) -> None:
    # a missing folder would be refused too; the format is refused first, naming what works
    refuse(capsys, build_root, ["--model", str(tmp_path / "absent"), "--format", "hf", "--quant", "int8_sq"],
           "--format hf cannot carry --quant int8_sq")


def test_hf_checkpoint_identity(build_root, smol_like) -> None:
    trtllm = plan_convert(ConvertSpec(model=str(smol_like), quant="fp8", kv_cache="fp8"))
    hf = plan_convert(ConvertSpec(model=str(smol_like), quant="fp8", kv_cache="fp8", format="hf"))
    assert trtllm.format == "trtllm" and "format" not in trtllm.inputs, "trtllm ids must not change"
    assert trtllm.ckpt_id == checkpoint_id("fp8", "fp8", 1, 1, trtllm.inputs_hash)
    assert hf.format == "hf" and hf.inputs["format"] == "hf" and hf.inputs_hash != trtllm.inputs_hash
    assert hf.ckpt_id == f"hf-fp8-kvfp8-{hf.inputs_hash[:8]}" and hf.out.parent == trtllm.out.parent
    plain = plan_convert(ConvertSpec(model=str(smol_like), quant="bf16", format="HF"))
    assert plain.ckpt_id.startswith("hf-bf16-") and plain.dtype == "bfloat16" and plain.calibration is None


@pytest.mark.parametrize("arch, model_type, why", [
    ("GemmaForCausalLM", "gemma", "none for Gemma 1"),
    ("GPT2LMHeadModel", "gpt2", "no GPT-2 class"),
])
def test_hf_format_refuses_architectures_the_pytorch_backend_has_no_class_for(capsys, build_root, tmp_path, arch, model_type,
                                                                               why) -> None:
    folder = make_checkpoint(tmp_path / model_type, architectures=[arch], model_type=model_type)
    refuse(capsys, build_root, ["--model", str(folder), "--format", "hf", "--quant", "fp8"],
           f"cannot load {arch}", why, "--format hf takes LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM",
           "--format trtllm")


def test_convert_reports_to_the_reporter_passed_in_and_prints_nothing(build_root, smol_like, tmp_path, capsys) -> None:
    from pipeline.core.reporting import RecordingReporter

    calib = tmp_path / "calib.txt"
    calib.write_text("\n".join(f"sample {i}" for i in range(8)))
    reporter = RecordingReporter()
    plan_convert(ConvertSpec(model=str(smol_like), quant="fp16", calib_data=calib, calib_size=8), reporter)
    assert ("info", "convert: fp16 needs no calibration; --calib-data is not used.") in reporter.events
    plan_convert(ConvertSpec(model=str(smol_like), quant="fp16", calib_data=calib, calib_size=8))  # silent by default
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""

"""Contract: every trtllm-build flag we emit exists in the pinned release with a valid value, for every
GPU x precision x KV cache x goal; and the per-precision choices follow TensorRT-LLM's rules."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from pipeline.build.checkpoint import read_checkpoint
from pipeline.build.flags import builder_restriction, trtllm_build_command, trtllm_flags
from pipeline.build.memory import EngineTarget, default_limits
from pipeline.core.errors import UnsupportedError
from pipeline.core.gpus import get_gpu, gpu_table
from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS

LLAMA = Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b"
GPUS = [k for k, g in gpu_table().items() if not g.is_cpu]


@pytest.fixture(scope="module")
def flag_table(reference_tsv) -> dict[str, dict[str, str]]:
    return {row["flag"]: row for row in reference_tsv("trtllm_build_flags.tsv")}


@pytest.fixture(scope="module")
def shape():
    return read_checkpoint(LLAMA).shape


def _flag_dict(flags):
    return {f.name: f.value for f in flags}


def _assert_valid(argv: list[str], table: dict[str, dict[str, str]]) -> None:
    assert argv[0].endswith("trtllm-build")
    seen: set[str] = set()
    i = 1
    while i < len(argv):
        name = argv[i]
        assert name in table, f"{name} is not a trtllm-build flag of the pinned release"
        assert name not in seen, f"{name} emitted twice"
        seen.add(name)
        row = table[name]
        assert "DEPRECATED" not in row["note"], f"{name} is deprecated"
        if row["takes_value"] == "yes":
            end = i + 2
            if "nargs +" in row["note"]:  # --lora_dir A B, --lora_target_modules M N: values up to the next flag
                while end < len(argv) and not argv[end].startswith("--"):
                    end += 1
            values = argv[i + 1:end]
            assert values and not values[0].startswith("--"), f"{name} lacks a value"
            choices = [c for c in row["choices"].split("|") if c]
            for value in values:
                if choices:
                    assert value in choices or value.lower() in choices, f"{name} {value} not in {choices}"
                if "type int" in row["note"] or name in {"--tokens_per_block", "--workers"}:
                    assert int(value) >= 1, f"{name} {value} is not a positive int"
            i = end
        else:
            i += 1
    assert not ({"--multiple_profiles", "--opt_num_tokens"} <= seen), "multiple_profiles conflicts with opt_num_tokens"


COMBOS = list(itertools.product(GPUS, QUANT_FORMATS, KV_CACHE_FORMATS, ("latency", "throughput"), (1, 2)))


@pytest.mark.parametrize("gpu_key,quant,kv,goal,tp", COMBOS)
def test_every_emitted_flag_exists_with_a_valid_value(gpu_key, quant, kv, goal, tp, flag_table, shape):
    gpu, q, k = get_gpu(gpu_key), QUANT_FORMATS[quant], KV_CACHE_FORMATS[kv]
    if not (gpu.can_run(q) and gpu.can_run_kv(k)) or builder_restriction(gpu, q, k):
        with pytest.raises(UnsupportedError):
            target = EngineTarget(shape, gpu, q, k, tp, 1, goal)
            trtllm_flags(target, default_limits(target))
        return
    target = EngineTarget(shape, gpu, q, k, tp, 1, goal)
    flags = trtllm_flags(target, default_limits(target))
    _assert_valid(trtllm_build_command(Path("ckpt"), Path("out"), flags), flag_table)
    values = _flag_dict(flags)
    assert values["--kv_cache_type"] == "paged"
    assert values["--remove_input_padding"] == "enable" and values["--context_fmha"] == "enable"
    assert values["--workers"] == str(tp)
    fp8_ctx = q.quant_algo in {"FP8", "W4A8_AWQ", "NVFP4"} and kv == "fp8"
    assert values["--use_fp8_context_fmha"] == ("enable" if fp8_ctx else "disable")
    if kv == "int8":
        assert values["--use_paged_context_fmha"] == "disable"  # the builder refuses it with an INT8 KV cache
    if kv == "auto":
        assert values["--use_paged_context_fmha"] == "enable"  # KV reuse and chunked context
    if goal == "latency":
        assert int(values["--max_batch_size"]) <= 64 and values["--multiple_profiles"] == "disable"
    else:
        assert int(values["--max_batch_size"]) >= 8 and values["--multiple_profiles"] == "enable"
    assert int(values["--max_num_tokens"]) >= int(values["--max_input_len"])


def test_gemm_plugin_choice_per_precision(shape):
    h100, a100, b200 = get_gpu("h100"), get_gpu("a100"), get_gpu("b200")

    def gemm(gpu, quant, goal, kv="auto", **limits):
        q, k = QUANT_FORMATS[quant], KV_CACHE_FORMATS[kv]
        target = EngineTarget(shape, gpu, q, k, 1, 1, goal)
        return _flag_dict(trtllm_flags(target, default_limits(target, **limits)))["--gemm_plugin"]

    assert gemm(a100, "fp16", "throughput") == "auto"
    assert gemm(a100, "int8_sq", "latency") == "auto"
    assert gemm(h100, "fp8", "throughput") == "disable"
    assert gemm(h100, "fp8", "latency", max_batch_size=4) == "fp8"  # the small-batch FP8 GEMM plugin
    assert gemm(get_gpu("l40s"), "fp8", "latency", max_batch_size=2) == "fp8"
    assert gemm(h100, "fp8", "latency", max_batch_size=16) == "disable"
    assert gemm(b200, "fp8", "latency", max_batch_size=4) == "disable"
    assert gemm(b200, "nvfp4", "throughput") == "nvfp4"


def test_refusals_name_gpu_and_alternative(shape):
    with pytest.raises(UnsupportedError, match="a100-80gb.*fp8"):
        q, k = QUANT_FORMATS["fp8"], KV_CACHE_FORMATS["auto"]
        target = EngineTarget(shape, get_gpu("a100"), q, k, 1, 1, "latency")
        trtllm_flags(target, default_limits(target))
    with pytest.raises(UnsupportedError, match="SM 10.0") as refused:
        q = QUANT_FORMATS["int8_sq"]
        target = EngineTarget(shape, get_gpu("b200"), q, KV_CACHE_FORMATS["auto"], 1, 1, "latency")
        trtllm_flags(target, default_limits(target))
    assert "fp8" in (refused.value.hint or "")


def test_user_overrides_win(shape):
    gpu, q, k = get_gpu("l40s"), QUANT_FORMATS["fp8"], KV_CACHE_FORMATS["fp8"]
    target = EngineTarget(shape, gpu, q, k, 1, 1, "throughput")
    limits = default_limits(target, max_input_len=3000, max_seq_len=4096,
                            max_batch_size=48, max_num_tokens=4096)
    values = _flag_dict(trtllm_flags(target, limits, tokens_per_block=128, gemm_plugin="fp8"))
    assert (values["--max_input_len"], values["--max_seq_len"], values["--max_batch_size"], values["--max_num_tokens"]) == (
        "3000", "4096", "48", "4096")
    assert values["--tokens_per_block"] == "128" and values["--gemm_plugin"] == "fp8"
    with pytest.raises(UnsupportedError):
        trtllm_flags(target, limits, tokens_per_block=48)


@pytest.mark.parametrize("gpu,quant,kv,goal", [("h100", "fp8", "fp8", "throughput"), ("a100", "int8_sq", None, "latency"),
                                               ("l40s", "fp8", None, "latency")])
def test_cli_dry_run_json_command_is_valid(gpu, quant, kv, goal, flag_table, tmp_path, monkeypatch, capsys):
    from pipeline.cli import run

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    argv = ["build", "--checkpoint", str(LLAMA), "--gpu", gpu, "--quant", quant, "--goal", goal, "--dry-run", "--json"]
    assert run(argv + (["--kv-cache", kv] if kv else [])) == 0
    plan = json.loads(capsys.readouterr().out)
    _assert_valid(plan["command"], flag_table)
    assert plan["output_dir"] == plan["engine_dir"]  # the key both backends share (engine_dir stays for a release)
    assert plan["profile_name"].startswith(f"trtllm-{plan['gpu']['key']}-{quant}")
    assert plan["memory"]["fits"] is True
    assert not list(tmp_path.rglob("*.engine")), "a dry run builds nothing"


@pytest.mark.parametrize("gpu,quant", [("h100", "fp8"), ("a100", "bf16"), ("l40s", "int4_awq")])
def test_lora_build_command_is_valid(gpu, quant, flag_table, tmp_path):
    """A --lora build's whole command line (the engine flags plus --lora_plugin, --lora_dir A B,
    --lora_target_modules ..., --max_lora_rank) against the pinned release's flag table."""
    from lora_cases import ATTENTION, MLP, make_adapter, tiny_llama
    from pipeline.build.lora_build import lora_flags, plan_lora

    base = tiny_llama(tmp_path / "base")
    lora = plan_lora([f"a={make_adapter(base, tmp_path / 'a', rank=8, targets=ATTENTION)}",
                      f"b={make_adapter(base, tmp_path / 'b', rank=4, targets=MLP, seed=2)}"],
                     read_checkpoint(base).shape.model_copy(update={"dtype": "bfloat16"}))
    g, q, k = get_gpu(gpu), QUANT_FORMATS[quant], KV_CACHE_FORMATS["auto"]
    target = EngineTarget(read_checkpoint(LLAMA).shape, g, q, k, 1, 1, "throughput")
    argv = trtllm_build_command(Path("ckpt"), Path("out"), trtllm_flags(target, default_limits(target)) + lora_flags(lora))
    _assert_valid(argv, flag_table)
    assert argv[argv.index("--lora_plugin") + 1] == "bfloat16" and argv[argv.index("--max_lora_rank") + 1] == "8"

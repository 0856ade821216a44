"""Memory pre-check on Llama-3.1-8B's real shapes (the planner's arithmetic, adapted to the build),
and refusals that say what would fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.build.checkpoint import read_checkpoint
from pipeline.build.memory import EngineTarget, Limits, default_limits, estimate
from pipeline.core.gpus import get_gpu
from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS

LLAMA = Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b"
LIMITS = Limits(max_input_len=1024, max_seq_len=2048, max_batch_size=8, max_num_tokens=8192)


@pytest.fixture(scope="module")
def llama():
    return read_checkpoint(LLAMA).shape


def _llama_70b(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80,
        "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    return folder


def test_llama_8b_estimate(llama):
    fp16 = estimate(EngineTarget(llama, get_gpu("h100"), QUANT_FORMATS["fp16"], KV_CACHE_FORMATS["auto"], 1, 1), LIMITS)
    assert 14.8 < fp16.weights_gib < 15.1  # 8.03 B parameters at 2 bytes
    assert fp16.kv_bytes_per_token == 131072  # 2 x 32 layers x 8 kv heads x 128 x 2 bytes
    assert fp16.fits and not fp16.low_memory
    assert fp16.max_full_sequences > 200
    fp8 = estimate(EngineTarget(llama, get_gpu("h100"), QUANT_FORMATS["fp8"], KV_CACHE_FORMATS["fp8"], 1, 1), LIMITS)
    assert 8.2 < fp8.weights_gib < 8.7 and fp8.kv_bytes_per_token == 65536
    tp2 = estimate(EngineTarget(llama, get_gpu("h100"), QUANT_FORMATS["fp16"], KV_CACHE_FORMATS["auto"], 2, 1), LIMITS)
    assert tp2.kv_bytes_per_token == 65536 and tp2.weights_gib < fp16.weights_gib * 0.6
    pp2 = estimate(EngineTarget(llama, get_gpu("h100"), QUANT_FORMATS["fp16"], KV_CACHE_FORMATS["auto"], 1, 2), LIMITS)
    assert pp2.kv_bytes_per_token == 65536 and pp2.weights_gib < fp16.weights_gib * 0.6


def test_defaults_per_goal_and_overrides(llama):
    h100, fp8, kv = get_gpu("h100"), QUANT_FORMATS["fp8"], KV_CACHE_FORMATS["fp8"]
    latency = default_limits(EngineTarget(llama, h100, fp8, kv, 1, 1, "latency"))
    throughput = default_limits(EngineTarget(llama, h100, fp8, kv, 1, 1, "throughput"))
    assert (latency.max_input_len, latency.max_seq_len) == (1024, 2048)
    assert latency.max_batch_size < throughput.max_batch_size
    assert latency.max_num_tokens <= throughput.max_num_tokens
    assert latency.max_num_tokens >= latency.max_input_len  # a prompt in one chunk
    given = default_limits(EngineTarget(llama, h100, fp8, kv, 1, 1, "throughput"), max_batch_size=7, max_num_tokens=999,
                           max_input_len=100, max_seq_len=300)
    assert given == Limits(max_input_len=100, max_seq_len=300, max_batch_size=7, max_num_tokens=999)


def test_llama_70b_refused_on_one_h100_with_what_would_fit(tmp_path, monkeypatch, capsys):
    from pipeline.cli import run

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    model = _llama_70b(tmp_path / "llama-70b")
    code = run(["build", "--checkpoint", str(model), "--gpu", "h100", "--quant", "fp16", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "does not fit on h100-sxm" in err and "GiB" in err
    assert "--tp 2" in err and "--quant fp8" in err


def test_low_memory_is_reported_with_a_fix(tmp_path, monkeypatch, capsys):
    from pipeline.cli import run

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    model = _llama_70b(tmp_path / "llama-70b")
    # INT4-AWQ 70B on one 48 GB L40S: ~37 GiB of weights leave KV for only a few 8k-token sequences
    code = run(["build", "--checkpoint", str(model), "--gpu", "l40s", "--quant", "int4_awq", "--goal", "latency",
                "--max-seq-len", "8192", "--max-input-len", "4096", "--dry-run", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    assert plan["memory"]["low_memory"] is True
    assert any("low memory" in note and "--tp 2" in note for note in plan["notes"])


def test_what_would_fit_names_stages_and_says_an_engine_converts_again() -> None:
    """Llama 3.1 405B NVFP4 on one RTX PRO 6000 does not fit: the build names a larger TP and a deeper pipeline, which an
    engine takes at convert (its checkpoint fixes pp)."""
    from pipeline.build.memory import what_would_fit
    from pipeline.planner import published_model

    target = EngineTarget(published_model("llama-3.1-405b"), get_gpu("rtx-pro-6000"), QUANT_FORMATS["nvfp4"],
                          KV_CACHE_FORMATS["fp8"], 1, 1)
    assert not estimate(target, LIMITS).fits
    ideas = what_would_fit(target, LIMITS)
    assert "--tp 4" in ideas and "--pp 4 (an engine: convert again with it)" in ideas

"""Running trtllm-build: the child process runner, the missing-tool message, and the orchestration
(log, exit code, outputs, manifest, cache) with a stand-in `trtllm-build` script on PATH.

The stand-in is a plain script that behaves like the tool at its interface (reads --output_dir,
writes config.json and rank<N>.engine, or fails with a message); the real tool runs only in the
pinned image on a GPU, and its command line is checked by the contract test in test_engine_flags.py.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from pipeline.build import BuildSpec, build_engine
from pipeline.build.runner import run_logged
from pipeline.cli import run
from pipeline.core.errors import StageFailedError
from reporting_helpers import ProgressLog

STAND_IN = """#!{python}
import json, os, sys
argv = sys.argv[1:]
out = argv[argv.index("--output_dir") + 1]
print("stand-in trtllm-build", " ".join(argv), flush=True)
if os.environ.get("STAND_IN_FAIL"):
    print("[TRT-LLM] [E] out of memory while building rank 0", flush=True)
    sys.exit(7)
os.makedirs(out, exist_ok=True)
workers = int(argv[argv.index("--workers") + 1])
json.dump({{"version": "1.1.0", "pretrained_config": {{}}, "build_config": {{}}}}, open(os.path.join(out, "config.json"), "w"))
for rank in range(workers):
    open(os.path.join(out, f"rank{{rank}}.engine"), "wb").write(b"engine" * 100)
with open(os.environ["STAND_IN_ARGV"], "w") as f:
    json.dump(argv, f)
with open(os.environ["STAND_IN_ARGV"] + ".env", "w") as f:
    json.dump(dict(os.environ), f)
"""


def trtllm_checkpoint(folder: Path, quant_algo: str | None = "FP8", kv: str | None = "FP8", tp: int = 1) -> Path:
    """A TensorRT-LLM checkpoint config with Llama-3.1-8B's shapes (weights are not read by the plan)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architecture": "LlamaForCausalLM", "dtype": "bfloat16", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
        "max_position_embeddings": 131072, "head_size": 128,
        "quantization": {"quant_algo": quant_algo, "kv_cache_quant_algo": kv},
        "mapping": {"world_size": tp, "tp_size": tp, "pp_size": 1}}))
    for rank in range(tp):
        (folder / f"rank{rank}.safetensors").write_bytes(b"\0" * 64)
    return folder


@pytest.fixture()
def env(tmp_path, monkeypatch):
    root = tmp_path / "build"
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(root))
    tools = tmp_path / "bin"
    tools.mkdir()
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    monkeypatch.setenv("STAND_IN_ARGV", str(tmp_path / "argv.json"))
    return {"root": root, "tools": tools, "argv": tmp_path / "argv.json"}


def install_stand_in(tools: Path) -> None:
    script = tools / "trtllm-build"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_runner_streams_the_log_and_reports_exit_code_and_memory(tmp_path):
    # memory is sampled every SAMPLE_S: the child stays up for a few samples (in 0.06 s it can exit between two of them)
    code = ("import sys, time; b = bytearray(64 << 20); print('line one', flush=True); time.sleep(1); print('line two'); "
            "sys.exit(3)")
    result = run_logged([sys.executable, "-c", code], tmp_path / "logs" / "x.log")
    assert result.returncode == 3
    log = (tmp_path / "logs" / "x.log").read_text()
    assert "line one" in log and "line two" in log and "exit code 3" in log
    assert result.peak_rss_mib > 0 and result.duration_s > 0
    assert "line two" in result.log_tail(3)


def test_missing_trtllm_build_says_where_it_runs(env, capsys):
    ckpt = trtllm_checkpoint(env["root"] / "llama" / "checkpoints" / "fp8kvfp8-tp1-x")
    assert run(["build", "--checkpoint", str(ckpt), "--gpu", "h100"]) == 3
    err = capsys.readouterr().err
    assert "trtllm-build is not installed" in err and "nvcr.io/nvidia/tritonserver" in err
    assert "make engine" in err and "--dry-run" in err
    assert not (env["root"] / "llama" / "engines").exists() or not any((env["root"] / "llama" / "engines").glob("[!.]*"))


def test_failed_build_surfaces_exit_code_and_log_tail_and_keeps_no_engine(env, monkeypatch):
    install_stand_in(env["tools"])
    monkeypatch.setenv("STAND_IN_FAIL", "1")
    ckpt = trtllm_checkpoint(env["root"] / "llama" / "checkpoints" / "fp8kvfp8-tp1-x")
    with pytest.raises(StageFailedError) as failed:
        build_engine(BuildSpec(checkpoint=ckpt, gpu="h100", goal="throughput"))
    message = str(failed.value)
    assert "exited with code 7" in message and "out of memory while building rank 0" in message
    engines = env["root"] / "llama" / "engines"
    assert [p.name for p in engines.iterdir() if not p.name.startswith(".")] == []
    logs = list(engines.glob(".*.build.log"))
    assert len(logs) == 1 and "out of memory" in logs[0].read_text()


def test_successful_build_runs_the_planned_command_and_caches(env):
    install_stand_in(env["tools"])
    ckpt = trtllm_checkpoint(env["root"] / "llama" / "checkpoints" / "fp8kvfp8-tp2-x", tp=2)
    spec = BuildSpec(checkpoint=ckpt, gpu="h100", goal="latency")
    result = build_engine(spec)
    engine = result.engine_dir
    assert not result.cached and (engine / "rank0.engine").is_file() and (engine / "rank1.engine").is_file()
    argv = json.loads(env["argv"].read_text())
    planned = result.plan.command[1:]
    out_at = planned.index("--output_dir") + 1
    assert argv[:out_at] == planned[:out_at] and argv[out_at + 1:] == planned[out_at + 1:]  # only the temp output dir differs
    assert argv[argv.index("--workers") + 1] == "2"
    manifest = json.loads((engine / "manifest.json").read_text())
    assert manifest["profile"]["tp"] == 2 and manifest["gpu"]["compute_capability"] == "9.0"
    assert manifest["command"] == result.plan.command and manifest["timings"]["trtllm_build_s"] > 0
    assert manifest["peak_rss_mib"] is not None and "rank1.engine" in manifest["files"]
    assert manifest["versions"]["trtllm_engine"] == "1.1.0"  # what the tool wrote into config.json, read back
    assert "stand-in trtllm-build" in (engine / "build.log").read_text()
    os.remove(env["argv"])
    again = build_engine(spec)
    assert again.cached and not env["argv"].exists()  # the tool did not run again


def test_trtllm_build_runs_under_the_images_python_not_the_pipelines_venv(env, monkeypatch):
    """In the image the pipeline runs from its own venv; trtllm-build must not inherit it (#21): no venv bin/ on its
    PATH, no VIRTUAL_ENV, so it and every Python it starts import TensorRT-LLM's own transformers."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment: there is no venv to keep away")
    install_stand_in(env["tools"])
    own_bin = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{own_bin}:{env['tools']}:/usr/bin:/bin")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    ckpt = trtllm_checkpoint(env["root"] / "llama" / "checkpoints" / "fp8kvfp8-tp1-x")
    build_engine(BuildSpec(checkpoint=ckpt, gpu="h100", goal="latency"))
    seen = json.loads(Path(str(env["argv"]) + ".env").read_text())
    assert seen["PATH"].split(os.pathsep) == [str(env["tools"]), "/usr/bin", "/bin"]
    assert "VIRTUAL_ENV" not in seen


def test_build_shows_the_tools_output_as_progress_on_the_reporter_and_prints_nothing(env, capsys):
    install_stand_in(env["tools"])
    ckpt = trtllm_checkpoint(env["root"] / "llama" / "checkpoints" / "fp8kvfp8-tp2-x", tp=2)
    reporter = ProgressLog()
    build_engine(BuildSpec(checkpoint=ckpt, gpu="h100", goal="latency"), reporter)
    kinds = [call[0] for call in reporter.calls]
    assert kinds[0] == "start" and kinds[-1] == "finish" and reporter.calls[0][2] is None  # a tool of unknown length
    assert any(call[0] == "advance" and "stand-in trtllm-build" in call[2] for call in reporter.calls)
    assert capsys.readouterr().err == ""


def test_engine_folder_keeps_the_tokenizer_of_its_hf_source(env):
    """build/<model>/hf beside the checkpoint is its source: its tokenizer files (not its weights) go into
    <engine>/tokenizer/, so `pipeline render` needs no --tokenizer; without a known source the plan says so."""
    install_stand_in(env["tools"])
    ckpt = trtllm_checkpoint(env["root"] / "llama" / "checkpoints" / "fp8kvfp8-tp1-x")
    bare = build_engine(BuildSpec(checkpoint=ckpt, gpu="h100", goal="latency"))
    assert bare.plan.tokenizer is None and any("--tokenizer" in note for note in bare.plan.notes)
    assert not (bare.engine_dir / "tokenizer").exists()
    hf = env["root"] / "llama" / "hf"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (hf / "tokenizer.json").write_text('{"version": "1.0"}')
    (hf / "tokenizer_config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"\0" * 64)
    result = build_engine(BuildSpec(checkpoint=ckpt, gpu="h100", goal="latency"))
    assert not result.cached  # the tokenizer is part of what the engine folder holds: rebuilt
    assert sorted(p.name for p in (result.engine_dir / "tokenizer").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    manifest = json.loads((result.engine_dir / "manifest.json").read_text())
    assert manifest["tokenizer"] == str(hf.resolve()) and "tokenizer/tokenizer.json" in manifest["files"]

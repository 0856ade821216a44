"""`pipeline serve --api openai` for real: a CPU PyTorch-backend deployable of the demo model served by
`transformers serve --continuous-batching` (the CLI in a child process, as a user runs it), one streaming chat
completion over plain HTTP (aiohttp) with usage tokens, then SIGTERM: the CLI stops its server and exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmapi_helpers import build_cpu_deployable, make_deployable  # noqa: E402

from pipeline.serve import free_port  # noqa: E402

PIPELINE = Path(sys.executable).parent / "pipeline"


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310
            return response.status
    except OSError:
        return 0


async def _stream_chat(base: str, model: str) -> dict:
    import aiohttp

    body = {"model": model, "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}}
    text, finish, usage, chunks = "", None, None, 0
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/v1/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                chunks += 1
                for choice in chunk.get("choices") or []:
                    text += (choice.get("delta") or {}).get("content") or ""
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
    return {"text": text, "finish_reason": finish, "usage": usage, "chunks": chunks}


def _read_result(cli: subprocess.Popen) -> str:
    """The CLI's --json result: printed when the server is ready and warmed up (the pytest timeout bounds the wait)."""
    lines = []
    for line in cli.stdout:
        lines.append(line)
        if line.rstrip() == "}":
            return "".join(lines)
    raise AssertionError(f"pipeline serve exited ({cli.wait()}) before it was ready: {cli.stderr.read()}")


@pytest.mark.server
def test_openai_server_on_the_cpu(demo_hf_dir: Path, tmp_path: Path) -> None:
    deployable = build_cpu_deployable(demo_hf_dir)
    port = free_port()
    log = tmp_path / "transformers-serve.log"
    cli = subprocess.Popen([str(PIPELINE), "serve", "--api", "openai", str(deployable), "--http-port", str(port),
                            "--log-file", str(log), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "PIPELINE_BUILD_DIR": str(tmp_path / "build")})
    try:
        ready = json.loads(_read_result(cli))  # printed once warmed up
        assert ready["url"] == f"http://127.0.0.1:{port}/v1" and ready["server"] == "transformers"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:  # noqa: S310
            model = json.loads(response.read())["data"][0]["id"]
        assert model == ready["model"] == str(deployable / "model")
        answer = asyncio.run(_stream_chat(f"http://127.0.0.1:{port}", model))
        assert "Paris" in answer["text"] and answer["finish_reason"] in ("stop", "length")
        usage = answer["usage"]
        assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 12
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert answer["chunks"] >= 2  # streamed, not one body
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=60) == 0  # an orderly stop of a ready server, as for tritonserver
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert _status(f"http://127.0.0.1:{port}/health") == 0  # the server went with the CLI
    assert log.read_text().startswith("# ") and "--continuous-batching" in log.read_text().splitlines()[0]


@pytest.mark.server
def test_openai_server_dies_with_a_killed_cli(demo_hf_dir: Path, tmp_path: Path) -> None:
    """kill -9 of `pipeline serve --api openai` takes the server down (parent-death signal), port and all."""
    deployable = build_cpu_deployable(demo_hf_dir)
    port = free_port()
    cli = subprocess.Popen([str(PIPELINE), "serve", "--api", "openai", str(deployable), "--http-port", str(port),
                            "--log-file", str(tmp_path / "serve.log"), "--json", "--no-warmup"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(_read_result(cli))
        assert _status(f"http://127.0.0.1:{port}/health") == 200
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=30)
        for _ in range(100):
            try:
                os.kill(ready["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"transformers serve (pid {ready['pid']}) outlived the killed CLI")
        assert _status(f"http://127.0.0.1:{port}/health") == 0
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


@pytest.mark.gpu
def test_trtllm_serve_knows_every_flag_we_pass(tmp_path: Path) -> None:
    """Where TensorRT-LLM is installed (the NGC image): every option of our trtllm-serve command is one its
    `trtllm-serve serve --help` lists."""
    import shutil

    from pipeline.core.deployable import read_deployable
    from pipeline.serve.openai import trtllm_command

    if not shutil.which("trtllm-serve"):
        pytest.skip("trtllm-serve (TensorRT-LLM 1.1, the NGC image) is not installed here; the command line is "
                    "asserted against the upstream flags in tests/unit/serve/test_commands.py")
    help_text = subprocess.run(["trtllm-serve", "serve", "--help"], capture_output=True, text=True, timeout=300).stdout
    deployable = read_deployable(make_deployable(tmp_path / "build", gpu="h100-sxm"))
    for flag in (a for a in trtllm_command(deployable, "127.0.0.1", 8000) if a.startswith("--")):
        assert flag in help_text, flag

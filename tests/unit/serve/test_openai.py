"""`pipeline serve --api openai`: which server, its command line, and the folders each API refuses."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from llmapi_helpers import make_deployable  # noqa: E402

from pipeline.cli import run  # noqa: E402
from pipeline.core.deployable import read_deployable  # noqa: E402
from pipeline.core.errors import InvalidInputError, StageFailedError, ToolMissingError  # noqa: E402
from pipeline.serve.openai import (check_api, choose_engine, warm_up,  # noqa: E402
                                    transformers_serve_command, trtllm_command)
from pipeline.render import RenderSpec, render  # noqa: E402

GPU_OPTIONS = """tensor_parallel_size: 2
max_batch_size: 64
max_num_tokens: 8192
kv_cache_config:
  free_gpu_memory_fraction: 0.9
  dtype: fp8
"""


def test_trtllm_serve_command_serves_model_dir_with_the_options_file(tmp_path: Path) -> None:
    deployable = read_deployable(make_deployable(tmp_path / "build", gpu="h100-sxm", options=GPU_OPTIONS))
    command = trtllm_command(deployable, "0.0.0.0", 8000)
    # `trtllm-serve serve` of 1.1.0 (v1.1.0 @48b7b5d8): MODEL positional, --backend, --tp_size, --extra_llm_api_options
    assert command == ["trtllm-serve", "serve", str(deployable.path / "model"), "--host", "0.0.0.0", "--port", "8000",
                       "--backend", "pytorch", "--tp_size", "2", "--pp_size", "1",
                       "--extra_llm_api_options", str(deployable.path / "llm_api_options.yaml")]


def test_transformers_serve_command_pins_the_model_on_the_cpu(tmp_path: Path) -> None:
    options = "max_num_tokens: 1024\nkv_cache_config:\n  tokens_per_block: 16\n  max_tokens: 1000\n"
    deployable = read_deployable(make_deployable(tmp_path / "build", options=options))
    command = transformers_serve_command(deployable, "127.0.0.1", 8123)
    assert command[:3] == ["transformers", "serve", str(deployable.path / "model")]  # FORCE_MODEL positional
    for flag, value in (("--device", "cpu"), ("--dtype", "float32"), ("--port", "8123"), ("--host", "127.0.0.1"),
                        ("--cb-block-size", "16"), ("--cb-max-batch-tokens", "1024"), ("--cb-num-blocks", "63")):
        assert command[command.index(flag) + 1] == value
    assert "--continuous-batching" in command


def test_transformers_serve_knows_every_flag_we_pass(tmp_path: Path) -> None:
    """The flags exist in the installed transformers' `transformers serve` (5.24)."""
    import subprocess

    binary = Path(sys.executable).parent / "transformers"
    if not binary.is_file():
        pytest.skip("the transformers command is not installed beside this Python")
    help_text = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=120,
                               env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
    deployable = read_deployable(make_deployable(tmp_path / "build", options="max_num_tokens: 64\n"))
    for flag in (a for a in transformers_serve_command(deployable, "h", 1) if a.startswith("--")):
        assert flag in help_text, flag


def test_cpu_deployable_gets_transformers(tmp_path: Path) -> None:
    assert choose_engine(read_deployable(make_deployable(tmp_path / "build"))) == "transformers"


def test_quantized_gpu_deployable_without_trtllm_serve_is_refused_with_the_command(tmp_path: Path, monkeypatch) -> None:
    if shutil.which("trtllm-serve"):
        pytest.skip("trtllm-serve is installed here")
    folder = make_deployable(tmp_path / "build", gpu="h100-sxm", options=GPU_OPTIONS)
    (folder / "model" / "hf_quant_config.json").write_text("{}")
    monkeypatch.setattr("pipeline.core.host.detect_gpu_key", lambda: "h100-sxm")
    with pytest.raises(ToolMissingError) as error:
        choose_engine(read_deployable(folder))
    assert "trtllm-serve serve" in error.value.hint and "--extra_llm_api_options" in error.value.hint


def test_api_openai_on_a_triton_repository_is_refused(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build")
    repo = render(RenderSpec(engine=deployable)).repo
    with pytest.raises(InvalidInputError) as error:
        check_api("openai", repo)
    assert str(deployable) in error.value.hint  # the deployable it was rendered from
    assert run(["serve", "--api", "openai", str(repo)]) == 2


def test_api_triton_on_a_deployable_is_refused(tmp_path: Path) -> None:
    deployable = make_deployable(tmp_path / "build")
    with pytest.raises(InvalidInputError, match="not a Triton model repository") as error:
        check_api("triton", deployable)
    assert "--api openai" in error.value.hint
    assert run(["serve", str(deployable)]) == 2


def test_triton_only_options_are_refused_with_api_openai(tmp_path: Path) -> None:
    assert run(["serve", "--api", "openai", "--grpc-port", "9001", str(make_deployable(tmp_path / "build"))]) == 2
    assert run(["serve", "--api", "grpc", str(tmp_path)]) == 2


class _FakeChat(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: the whole JSON, or two SSE chunks, a usage chunk and [DONE]."""

    bodies: list[dict] = []
    ANSWER = {"choices": [{"message": {"content": "Hello"}, "finish_reason": "length"}]}
    answer = ANSWER

    def do_POST(self) -> None:  # noqa: N802 (http.server's spelling)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        self.send_response(200)
        if not body["stream"]:
            payload = json.dumps(type(self).answer).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"delta": {"content": "Hel"}, "finish_reason": None}]},
                  {"choices": [{"delta": {"content": "lo"}, "finish_reason": "length"}]},
                  {"choices": [], "usage": {"completion_tokens": 2}}]
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args) -> None:
        pass


def test_warm_up_sends_one_short_whole_chat_and_refuses_an_empty_answer(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeChat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started = SimpleNamespace(url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="m", engine="transformers",
                              log_file=tmp_path / "server.log")
    _FakeChat.bodies.clear()
    try:
        warm_up(started, max_tokens=2)
        assert _FakeChat.bodies == [{"max_tokens": 2, "stream": False, "model": "m",
                                     "messages": [{"role": "user", "content": "Hello, warm-up."}]}]
        _FakeChat.answer = {"choices": []}
        with pytest.raises(StageFailedError, match="returned no answer"):
            warm_up(started)
    finally:
        _FakeChat.answer = _FakeChat.ANSWER
        server.shutdown()
        server.server_close()

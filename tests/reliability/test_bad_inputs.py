"""Bad inputs, table-driven: each row is one thing a user can get wrong, the exit code (CLI) or the
error (server) it must produce, and a fragment of the message that says what was wrong.

CLI rows run in-process through `pipeline.cli.run` with stderr captured: the exit code must match,
the message fragment must be on stderr next to a hint, and no traceback may reach the user.
Server rows send one request to the demo deployment (reference runtime, max_input_len 256,
max_seq_len 512): the answer must be an error naming the problem, quickly, never a hang.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from pipeline.cli import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TEMPLATES = Path(__file__).resolve().parents[2] / "model_repo_templates"


@dataclass(frozen=True)
class Row:
    id: str
    argv: tuple[str, ...]
    code: int
    fragment: str
    needs: tuple[str, ...] = ()  # environment set-ups: hub, gated, port, templates


ROWS: list[Row] = [
    # download: sources
    Row("unknown-source-scheme", ("download", "s3:bucket/model"), 2, "Unknown source scheme 's3'"),
    Row("source-path-missing", ("download", "{tmp}/missing"), 2, "Path not found"),
    Row("hub-id-without-scheme", ("download", "org/name"), 2, "write hf:org/name"),
    Row("empty-revision", ("download", "hf:org/name@"), 2, "Empty revision after '@'"),
    Row("two-revisions", ("download", "hf:org/name@a", "--revision", "b"), 2, "Two different revisions"),
    Row("revision-on-local-folder", ("download", "{tiny}", "--revision", "main"), 2, "--revision applies to hf:"),
    Row("missing-revision-offline", ("download", "hf:tiny-org/Tiny-Llama@no-such-branch"), 2,
        "revision 'no-such-branch' of tiny-org/Tiny-Llama is not in the Hugging Face cache", needs=("hub",)),
    Row("model-not-in-offline-cache", ("download", "hf:other-org/Unknown"), 2,
        "other-org/Unknown is not in the Hugging Face cache", needs=("hub",)),
    Row("gated-repo-without-token", ("download", "hf:gated-org/Gated-Model"), 2, "is gated", needs=("gated",)),
    Row("repo-id-path-traversal", ("download", "hf:org/../etc"), 2, "Invalid Hugging Face repo id"),
    Row("folder-without-config", ("download", "{empty_dir}"), 2, "has no config.json"),
    Row("only-pytorch-bin-weights", ("download", "local:{bin_only}"), 2, "has no *.safetensors weights"),
    Row("truncated-safetensors", ("download", "{truncated}"), 2, "is truncated"),
    Row("gguf-that-is-not-gguf", ("download", "gguf:{not_gguf}"), 2, "is not a GGUF file"),
    Row("gguf-path-is-folder", ("download", "gguf:{tmp}"), 2, "is a folder, not a GGUF file"),
    Row("out-is-foreign-folder", ("download", "{tiny}", "--out", "{foreign}"), 2, "was not made by `pipeline download`"),
    # convert / build: GPU, precision, parallelism, calibration
    Row("unknown-gpu", ("build", "--gpu", "h999", "--checkpoint", "{tiny}", "--quant", "fp16", "--dry-run"), 2,
        "Unknown GPU 'h999'"),
    Row("fp8-on-a100", ("convert", "--model", "{tiny}", "--quant", "fp8", "--gpu", "a100"), 2,
        "a100-80gb (SM 8.0) cannot run fp8"),
    Row("nvfp4-on-h100", ("build", "--gpu", "h100", "--checkpoint", "{tiny}", "--quant", "nvfp4", "--dry-run"), 2,
        "h100-sxm (SM 9.0) cannot run nvfp4"),
    Row("unknown-quant", ("convert", "--model", "{tiny}", "--quant", "int3"), 2, "Unknown quantization format 'int3'"),
    Row("unknown-kv-cache", ("convert", "--model", "{tiny}", "--kv-cache", "fp4"), 2, "Unknown KV-cache format 'fp4'"),
    Row("unknown-dtype", ("convert", "--model", "{tiny}", "--dtype", "float8"), 2, "--dtype: Input should be 'float16' or 'bfloat16' (got 'float8')"),
    Row("tp-not-dividing-heads-convert", ("convert", "--model", "{tiny}", "--tp", "4"), 2,
        "--tp 4 does not divide the model's 2 attention heads"),
    Row("tp-not-dividing-heads-build", ("build", "--gpu", "h100", "--checkpoint", "{tiny}", "--quant", "fp16",
                                        "--tp", "3", "--dry-run"), 2, "--tp 3 does not divide"),
    Row("tp-zero", ("convert", "--model", "{tiny}", "--tp", "0"), 2, "Invalid value for '--tp'"),
    Row("calibration-file-empty", ("convert", "--model", "{tiny}", "--quant", "int8_sq", "--calib-data", "{empty_calib}"), 2,
        "holds no text samples"),
    Row("unknown-goal", ("build", "--gpu", "h100", "--checkpoint", "{tiny}", "--quant", "fp16", "--goal", "fast",
                         "--dry-run"), 2, "Unknown goal 'fast'"),
    Row("unknown-backend", ("build", "--gpu", "h100", "--checkpoint", "{tiny}", "--backend", "vllm", "--dry-run"), 2,
        "Unknown backend 'vllm'"),
    Row("unknown-backend-filter", ("profiles", "--model", "{tiny}", "--backend", "onnx"), 2, "Unknown backend 'onnx'"),
    Row("input-len-over-seq-len", ("build", "--gpu", "cpu", "--checkpoint", "{tiny}", "--max-input-len", "60",
                                   "--max-seq-len", "40"), 2, "max_input_len (60) must be smaller than max_seq_len (40)"),
    Row("seq-len-beyond-context-window", ("build", "--gpu", "cpu", "--checkpoint", "{tiny}", "--max-seq-len", "100"), 2,
        "max_seq_len 100 is beyond the model's max_position_embeddings (64)"),
    Row("model-name-traversal", ("build", "--gpu", "cpu", "--model", "../etc"), 2, "Invalid model name '../etc'"),
    Row("checkpoint-missing", ("build", "--gpu", "cpu", "--checkpoint", "{tmp}/nothing"), 2, "No checkpoint at"),
    Row("plan-tp-not-dividing", ("plan", "--model", str(FIXTURES / "llama-3.1-8b"), "--gpu", "h100", "--quant", "fp16",
                                 "--tp", "3"), 2, "--tp 3 does not divide the model's 32 attention heads"),
    # render / serve / k8s
    Row("render-not-an-engine", ("render", "--engine", "{tmp}/nothing"), 2, "is not an engine folder"),
    Row("render-unknown-runtime", ("render", "--engine", "{engine}", "--runtime", "bogus", "--out", "{tmp}/r"), 2,
        "--runtime: Input should be 'tensorrtllm', 'reference' or 'llmapi'"),
    Row("render-reference-engine-as-trt", ("render", "--engine", "{engine}", "--runtime", "tensorrtllm", "--out", "{tmp}/r"), 2,
        "is a reference-runtime folder"),
    Row("template-folder-missing-a-model", ("render", "--engine", "{engine}", "--out", "{tmp}/r"), 2,
        "has no tensorrt_llm/config.pbtxt.j2", needs=("templates",)),
    Row("serve-repo-missing", ("serve", "{tmp}/nothing"), 2, "does not exist"),
    Row("serve-unknown-api", ("serve", "--api", "grpc", "{tmp}/nothing"), 2, "Unknown api 'grpc'"),
    Row("serve-repo-without-models", ("serve", "{empty_dir}"), 2, "holds no model folder with a config.pbtxt"),
    Row("port-in-use", ("serve", str(FIXTURES / "echo_repo"), "--http-port", "{busy_port}"), 2, "is already in use",
        needs=("port",)),
    Row("serve-world-size-on-reference", ("serve", "{ref_repo}", "--world-size", "2"), 2, "needs the tensorrtllm runtime"),
    Row("k8s-unknown-profile", ("k8s", "render", "--profile", "nope"), 2, "No engine for profile 'nope'"),
    # bench / smoke
    Row("bench-unknown-arrival", ("bench", "--url", "127.0.0.1:9", "--arrival", "burst"), 2, "Unknown arrival 'burst'"),
    Row("smoke-unknown-endpoint", ("smoke", "--url", "http://127.0.0.1:9/v1", "--endpoint", "responses"), 2,
        "Unknown endpoint 'responses'"),
    Row("slo-bad-syntax", ("bench", "--url", "127.0.0.1:9", "--slo", "ttft<5"), 2, "Invalid SLO 'ttft<5'"),
    Row("slo-unknown-name", ("bench", "--url", "127.0.0.1:9", "--slo", "bogus=5"), 2, "Unknown SLO 'bogus'"),
    Row("concurrency-not-integers", ("bench", "--url", "127.0.0.1:9", "--concurrency", "a,b"), 2,
        "--concurrency 'a,b' is not a list of integers"),
    Row("smoke-no-server", ("smoke", "--url", "127.0.0.1:9"), 4, "Smoke failed against 127.0.0.1:9"),
    Row("unknown-command", ("frobnicate",), 2, "No such command 'frobnicate'"),
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory, tiny_ckpt: Path) -> dict[str, str]:
    """The files the rows point at: broken checkpoints, a reference engine folder, a tiny repo."""
    from pipeline.build.reference_folder import write_reference_engine_dir

    tmp = tmp_path_factory.mktemp("bad-inputs")
    empty_dir = tmp / "empty"
    empty_dir.mkdir()
    bin_only = tmp / "bin-only"
    bin_only.mkdir()
    (bin_only / "config.json").write_text("{}")
    (bin_only / "pytorch_model.bin").write_bytes(b"x")
    truncated = tmp / "truncated"
    truncated.mkdir()
    shutil.copy(tiny_ckpt / "config.json", truncated / "config.json")
    data = (tiny_ckpt / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    not_gguf = tmp / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip file, not a gguf")
    foreign = tmp / "precious"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    empty_calib = tmp / "calib.txt"
    empty_calib.write_text("\n\n")
    engine = write_reference_engine_dir(tiny_ckpt, tmp / "build" / "tiny" / "engines" / "ref", {"max_batch_size": 2})
    ref_repo = tmp / "ref-repo"
    (ref_repo / "tensorrt_llm").mkdir(parents=True)
    (ref_repo / "tensorrt_llm" / "config.pbtxt").write_text('name: "tensorrt_llm"\nbackend: "python"\n')
    return {"tmp": str(tmp), "tiny": str(tiny_ckpt), "empty_dir": str(empty_dir), "bin_only": str(bin_only),
            "truncated": str(truncated), "not_gguf": str(not_gguf), "foreign": str(foreign),
            "empty_calib": str(empty_calib), "engine": str(engine), "ref_repo": str(ref_repo)}


def _prepare(row: Row, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
             values: dict[str, str]) -> list:
    """Set up what the row needs; return things to close afterwards."""
    closers: list = []
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    if "hub" in row.needs:
        request.getfixturevalue("hub_cache")
    if "gated" in row.needs:
        from download_fixtures import FakeHub

        request.getfixturevalue("online")
        hub = FakeHub(error=(401, "GatedRepo")).__enter__()
        closers.append(lambda: hub.__exit__(None, None, None))
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
    if "port" in row.needs:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("", 0))
        sock.listen(1)
        closers.append(sock.close)
        values["busy_port"] = str(sock.getsockname()[1])
    if "templates" in row.needs:
        templates = tmp_path / "templates"
        shutil.copytree(TEMPLATES, templates)
        shutil.rmtree(templates / "tensorrt_llm")
        monkeypatch.setenv("PIPELINE_TEMPLATES_DIR", str(templates))
    return closers


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in ROWS])
def test_cli_bad_input(row: Row, paths: dict[str, str], request, monkeypatch, tmp_path: Path, capsys) -> None:
    values = dict(paths)
    closers = _prepare(row, request, monkeypatch, tmp_path, values)
    try:
        argv = [part.format(**values) for part in row.argv]
        capsys.readouterr()
        code = run(argv)
        err = capsys.readouterr().err
    finally:
        for close in closers:
            close()
    assert "Traceback" not in err, err
    assert code == row.code, err
    flat = " ".join(err.split())
    assert row.fragment in flat, err
    if code in (1, 2, 3, 4) and not row.fragment.startswith(("Invalid value", "No such command")):
        assert "error:" in err and "hint:" in err, err  # our own errors say what would work
    assert not (tmp_path / "build").exists() or row.id in {"port-in-use"}, "a refused command wrote under build/"


def test_there_are_at_least_30_rows() -> None:
    assert len(ROWS) + len(SERVER_ROWS) >= 30
    assert len({r.id for r in ROWS} | {r.id for r in SERVER_ROWS}) == len(ROWS) + len(SERVER_ROWS)


def test_debug_shows_the_traceback(capsys) -> None:
    assert run(["download", "s3:bucket/model"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert run(["--debug", "download", "s3:bucket/model"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "InvalidInputError" in err
    assert "error: Unknown source scheme 's3'" in err


def test_internal_error_is_one_line_without_debug(monkeypatch, capsys) -> None:
    """A bug (not one of our error types) exits 70 with one line; --debug lets the traceback through."""
    import pipeline.download

    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(pipeline.download, "parse_source", broken)
    assert run(["download", "demo"]) == 70
    err = capsys.readouterr().err
    assert "Internal error (KeyError)" in err and "--debug" in err and "Traceback" not in err
    with pytest.raises(KeyError):
        run(["--debug", "download", "demo"])


def test_engine_for_another_trtllm_version_or_gpu_is_refused(tmp_path: Path) -> None:
    """pipeline.build.profiles.check_engine_compatible: a TensorRT engine from another TensorRT-LLM release,
    for another GPU architecture, or on a machine without a GPU is refused with what would work."""
    from pipeline.core.errors import UnsupportedError
    from pipeline.build.profiles import BuildProfile, check_engine_compatible
    from pipeline.core.versions import TRTLLM_VERSION

    def engine(name: str, **profile) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"version": profile.get("trtllm_version", TRTLLM_VERSION),
                                                        "build_config": {"max_batch_size": 8}}))
        built = BuildProfile(model="m", model_revision="r", runtime="tensorrtllm", **profile)
        (folder / "manifest.json").write_text(json.dumps({"stage": "build", "profile": built.model_dump(mode="json")}))
        return folder

    old = engine("old", gpu="h100-sxm", compute_capability="9.0", trtllm_version="0.12.0")
    with pytest.raises(UnsupportedError, match=r"built with TensorRT-LLM 0\.12\.0 \(its config.json\); .*has 1\.1\.0"):
        check_engine_compatible(old, "h100")
    hopper = engine("hopper", gpu="h100-sxm", compute_capability="9.0")
    with pytest.raises(UnsupportedError, match=r"built for h100-sxm \(SM 9\.0.*this GPU is a100-80gb \(SM 8\.0"):
        check_engine_compatible(hopper, "a100")
    with pytest.raises(UnsupportedError, match="needs an NVIDIA GPU and there is none here"):
        check_engine_compatible(hopper, "cpu")
    assert check_engine_compatible(hopper, "h200").gpu == "h100-sxm"  # same SM 9.0: accepted


def _trt_engine(folder: Path, version: str) -> Path:
    """A TensorRT engine folder's config.json + manifest (no engine file: the checks read only these)."""
    from pipeline.build.profiles import BuildProfile

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"version": version, "build_config": {"max_batch_size": 8}}))
    built = BuildProfile(model="m", model_revision="r", runtime="tensorrtllm", gpu="h100-sxm", compute_capability="9.0",
                         trtllm_version=version)
    (folder / "manifest.json").write_text(json.dumps({"stage": "build", "profile": built.model_dump(mode="json")}))
    return folder


def test_render_refuses_engine_of_another_trtllm_version(tmp_path: Path, monkeypatch, capsys) -> None:
    """render checks the TensorRT-LLM version only (it needs no GPU: CI renders for GPU clusters)."""
    from pipeline.core.versions import TRTLLM_VERSION

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    engine = _trt_engine(tmp_path / "build" / "m" / "engines" / "old", "0.12.0")
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    (tokenizer / "tokenizer.json").write_text("{}")
    code = run(["render", "--engine", str(engine), "--tokenizer", str(tokenizer)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "built with TensorRT-LLM 0.12.0" in err and f"has {TRTLLM_VERSION}" in err, err
    assert not (tmp_path / "build" / "m" / "triton").exists()


@pytest.mark.parametrize("version, fragment", [("0.12.0", "built with TensorRT-LLM 0.12.0"),
                                               (None, "needs an NVIDIA GPU and there is none here")])
def test_serve_refuses_engine_it_cannot_run(version: str | None, fragment: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """serve reads the engine from tensorrt_llm's gpt_model_path and checks the version and this machine's GPU
    (pipeline.core.host.detect_gpu_key) before starting anything."""
    from pipeline.core.host import detect_gpu_key
    from pipeline.core.versions import TRTLLM_VERSION

    if version is None and detect_gpu_key() != "cpu":
        pytest.skip("this machine has a GPU: the no-GPU refusal cannot happen here")
    engine = _trt_engine(tmp_path / "engine", version or TRTLLM_VERSION)
    repo = tmp_path / "repo"
    (repo / "tensorrt_llm" / "1").mkdir(parents=True)
    (repo / "tensorrt_llm" / "config.pbtxt").write_text(
        f'name: "tensorrt_llm"\nbackend: "tensorrtllm"\nparameters: {{\n  key: "gpt_model_path"\n'
        f'  value: {{ string_value: "{engine}" }}\n}}\n')
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    code = run(["serve", str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and fragment in err and "hint:" in err, err


@pytest.mark.triton
@pytest.mark.slow
def test_server_that_never_becomes_ready(tmp_path: Path, monkeypatch, capsys) -> None:
    """A repository whose model fails to load: serve names the model and quotes its error, exit 1,
    within the short timeout, and leaves no server running."""
    import psutil

    repo = tmp_path / "repo"
    model = repo / "broken" / "1"
    model.mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "x", data_type: TYPE_FP32, dims: [1] }]\noutput [{ name: "y", data_type: TYPE_FP32, dims: [1] }]\n')
    (model / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n"
        "        raise RuntimeError('weights file is corrupt: cannot load')\n")
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    def servers_of_this_repo() -> set[int]:  # other tests or processes may start tritonservers meanwhile
        found = set()
        for proc in psutil.process_iter(["name", "cmdline"]):
            if proc.info["name"] == "tritonserver" and any(str(repo) in arg for arg in proc.info["cmdline"] or ()):
                found.add(proc.pid)
        return found

    started = time.monotonic()
    code = run(["serve", str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--timeout", "120"])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    flat = " ".join(err.split())
    assert "broken" in flat and "weights file is corrupt" in flat and "failed to load" in flat, err
    assert elapsed < 120, "the load failure was waited out (--timeout 120), not seen in the log"
    assert not servers_of_this_repo(), "the failed server was left running"


# ------------------------------------------------------------------------------------------------
# server rows: one request each against the demo deployment


@dataclass(frozen=True)
class ServerRow:
    id: str
    fragment: str  # in the error message (case-insensitive)
    options: dict = field(default_factory=dict)  # GenerateRequest fields
    tweak: str | None = None  # a raw change to the tensors build_inputs makes
    model: str = "ensemble"


SERVER_ROWS: list[ServerRow] = [
    ServerRow("prompt-beyond-max-input-len", "preprocessing: prompt has", {"prompt": "hello " * 600}),
    ServerRow("prompt-beyond-max-input-len-bls", "max_input_len 256", {"prompt": "hello " * 600}, model="tensorrt_llm_bls"),
    ServerRow("max-tokens-beyond-max-seq-len", "max_seq_len 512", {"max_tokens": 10_000}),
    ServerRow("max-tokens-zero", "at least 1", {"max_tokens": 0}),
    ServerRow("max-tokens-negative", "at least 1", {"max_tokens": -5}),
    ServerRow("empty-prompt", "empty", {"prompt": ""}),
    ServerRow("temperature-negative", "temperature must be >= 0", {"temperature": -1.0}),
    ServerRow("temperature-nan", "temperature must be >= 0", {"temperature": float("nan")}),
    ServerRow("top-p-above-one", "top_p (runtime_top_p) must be between 0 and 1", {"top_p": 2.0}),
    ServerRow("top-k-negative", "top_k (runtime_top_k) must be >= 0", {"top_k": -5}),
    ServerRow("min-tokens-negative", "min_tokens must be >= 0", {"min_tokens": -3}),
    ServerRow("temperature-negative-bls", "temperature must be >= 0", {"temperature": -1.0}, model="tensorrt_llm_bls"),
    ServerRow("top-p-above-one-bls", "top_p must be between 0 and 1", {"top_p": 2.0}, model="tensorrt_llm_bls"),
    ServerRow("top-k-negative-bls", "top_k must be >= 0", {"top_k": -5}, model="tensorrt_llm_bls"),
    ServerRow("non-utf8-prompt", "utf-8", {}, tweak="non_utf8"),
    ServerRow("stop-words-not-strings", "stop_words", {}, tweak="int_stop_words"),
    ServerRow("max-tokens-wrong-type", "max_tokens", {}, tweak="float_max_tokens"),
    # Triton 2.51's ensemble answers a missing required input with an empty response and no error: the
    # ensemble declares max_tokens optional so that preprocessing refuses the request by name
    ServerRow("max-tokens-missing", "REQUEST_OUTPUT_LEN (max_tokens) is required", {}, tweak="no_max_tokens"),
    ServerRow("max-tokens-missing-bls", "max_tokens", {}, tweak="no_max_tokens", model="tensorrt_llm_bls"),
    ServerRow("unknown-served-model", "unknown model", {}, tweak="unknown_model"),
]


@pytest.fixture(scope="module")
def served_s(demo_server) -> float:
    """Seconds a good request (the rows' defaults) takes to be served here: the slowest of three."""
    timings = []
    for _ in range(3):
        error, seconds = _server_request(demo_server.grpc_url, ServerRow("good", ""))
        assert error is None, error
        timings.append(seconds)
    return max(timings)


def _server_request(url: str, row: ServerRow, timeout_s: float = 60.0) -> tuple[str | None, float]:
    """Send the row's request on a gRPC stream; return (error message or None, seconds)."""
    import queue
    import uuid

    import tritonclient.grpc as grpcclient

    from pipeline.clients.triton import GenerateRequest, build_inputs, is_final

    options = {"prompt": "Tell me a short story.", "max_tokens": 8, **row.options}
    inputs = build_inputs(GenerateRequest(**options))
    model = row.model
    if row.tweak == "non_utf8":
        inputs[0].set_data_from_numpy(np.array([[b"caf\xe9 \xff\xfe bytes"]], dtype=object))
    elif row.tweak == "int_stop_words":
        stop = grpcclient.InferInput("stop_words", [1, 2], "INT32")
        stop.set_data_from_numpy(np.array([[1, 2]], dtype=np.int32))
        inputs.append(stop)
    elif row.tweak == "float_max_tokens":
        inputs[1] = grpcclient.InferInput("max_tokens", [1, 1], "FP32")
        inputs[1].set_data_from_numpy(np.array([[8.5]], dtype=np.float32))
    elif row.tweak == "no_max_tokens":
        inputs = [i for i in inputs if i.name() != "max_tokens"]
    elif row.tweak == "unknown_model":
        model = "no_such_model"
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    started = time.monotonic()
    error = None
    try:
        client.start_stream(callback=lambda result=None, error=None: events.put((result, error)))
        client.async_stream_infer(model, inputs, request_id=uuid.uuid4().hex[:8], enable_empty_final_response=True)
        while True:
            result, failure = events.get(timeout=timeout_s)
            if failure is not None:
                error = failure.message() if hasattr(failure, "message") else str(failure)
                break
            if is_final(result):
                break
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    return error, time.monotonic() - started


@pytest.mark.triton
@pytest.mark.slow
@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in SERVER_ROWS])
def test_server_bad_input(row: ServerRow, demo_server, served_s: float) -> None:
    error, seconds = _server_request(demo_server.grpc_url, row)
    assert error is not None, f"{row.id}: the server answered instead of refusing"
    assert row.fragment.lower() in error.lower(), error
    assert "Traceback" not in error, error
    # a ratio to a good request of the same size on the same server, so a busy machine slows both alike
    assert seconds < 3 * served_s + 1.0, f"{row.id}: the refusal took {seconds:.1f} s, serving takes {served_s:.1f} s"


@pytest.mark.triton
@pytest.mark.slow
def test_server_still_serves_after_bad_inputs(demo_server) -> None:
    """Refusals leave nothing behind: a normal request right after them succeeds."""
    from pipeline.clients.triton import generate

    answer = generate(demo_server.grpc_url, "ensemble", "The capital of France is", max_tokens=4, timeout_s=60)
    assert answer.ok and answer.text, answer.error

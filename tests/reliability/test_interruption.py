"""kill -9 each stage at several points: the previous good artifact of that stage is never damaged,
and a re-run completes.

Each stage first makes a good artifact in-process (its folder_hash recorded), then the same stage is
started again with --force in a child process (its own process group) and SIGKILLed at a point seen
on disk: the temporary folder appeared, files are being written into it, or a delay into the work.
Afterwards the artifact folder must hash exactly as before and still match its manifest; a plain
re-run must succeed (a no-op), and no temporary folder of the killed run may be left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from reliability_helpers import child_env, kill_when, pipeline_argv
from serve_leftovers import KILL_9_GONE_S, ready_json, remove_all, started_by, still_there, stub_regions
from pipeline.core.artifacts import folder_hash, is_up_to_date, read_manifest
from pipeline.cli import run

pytestmark = pytest.mark.slow


def _leftovers(dest: Path) -> list[Path]:
    return sorted(p for p in dest.parent.glob(f".{dest.name}.*") if p.is_dir())


def _temp_created(dest: Path):
    return lambda: any(p.name.startswith(f".{dest.name}.tmp-") for p in dest.parent.glob(f".{dest.name}.tmp-*"))


def _temp_has_files(dest: Path):
    def ready() -> bool:
        return any(any(f.is_file() for f in tmp.rglob("*")) for tmp in dest.parent.glob(f".{dest.name}.tmp-*"))
    return ready


def _after(dest: Path, seconds: float):
    seen: dict[str, float] = {}

    def ready() -> bool:
        if "t" not in seen and _temp_created(dest)():
            seen["t"] = time.monotonic()
        return "t" in seen and time.monotonic() - seen["t"] >= seconds
    return ready


POINTS = {"temp-created": _temp_created, "temp-has-files": _temp_has_files,
          "0.3s-in": lambda dest: _after(dest, 0.3), "3s-in": lambda dest: _after(dest, 3.0)}
RESULTS: list[dict] = []  # what happened at each kill point


@pytest.fixture(scope="module", autouse=True)
def _write_results(tmp_path_factory: pytest.TempPathFactory):
    """After the module: what each kill did, as JSON (path printed; -s shows it) for the closing note."""
    yield
    out = Path(tmp_path_factory.getbasetemp()) / "interruption-results.json"
    out.write_text(json.dumps(RESULTS, indent=2))
    print(f"\ninterruption results: {out}\n" + json.dumps(RESULTS))


def _assert_intact(dest: Path, before: str) -> None:
    assert dest.is_dir(), f"{dest} disappeared"
    manifest = read_manifest(dest)
    assert manifest is not None, f"{dest} lost its manifest"
    assert folder_hash(dest) == before, f"{dest} changed"
    assert is_up_to_date(dest, manifest["inputs_hash"]), f"{dest} no longer matches its manifest"


def _interrupt(stage: str, argv: list[str], dest: Path, build: Path, point: str, tmp_path: Path) -> bool:
    """Run `pipeline *argv` in a child and SIGKILL it at `point`; True when the kill landed mid-stage."""
    log = tmp_path / f"{stage}-{point}.log"
    with open(log, "wb") as out:
        child = subprocess.Popen(pipeline_argv(*argv), env=child_env(build), stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        hit = kill_when(child, POINTS[point](dest), timeout_s=600)
    if not hit:
        assert child.returncode == 0, log.read_text(errors="replace")[-2000:]
    return hit


def _kill_rerun_check(stage: str, argv: list[str], dest: Path, build: Path, points: list[str], tmp_path: Path,
                      monkeypatch) -> None:
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(build))
    before = folder_hash(dest)
    hits = 0
    for point in points:
        hit = _interrupt(stage, [*argv, "--force"], dest, build, point, tmp_path)
        hits += hit
        left = _leftovers(dest)  # before any check: is_up_to_date clears a killed run's leftovers
        _assert_intact(dest, before)
        assert run(argv) == 0  # the re-run completes (a no-op: the artifact is intact) ...
        _assert_intact(dest, before)
        assert not _leftovers(dest), f"temporary folders of the killed run remain: {_leftovers(dest)}"
        RESULTS.append({"stage": stage, "point": point, "killed_mid_stage": hit, "left_by_kill": len(left),
                        "artifact_intact": True, "rerun": "ok"})
    assert hits, f"{stage}: no kill landed inside the stage (it finished before every kill point)"


# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bigger_ckpt(tmp_path_factory: pytest.TempPathFactory, tiny_ckpt: Path) -> Path:
    """The tiny Llama with wider layers (~25 MB of weights), so copies take long enough to be hit."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("wider-llama")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=128)
    LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tiny_ckpt / name).read_bytes())
    return folder


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, bigger_ckpt: Path) -> dict[str, Path]:
    """download (local) -> convert fp16 -> build --gpu cpu -> render, once, in one build root."""
    import os

    build = tmp_path_factory.mktemp("interrupt-build")
    old = os.environ.get("PIPELINE_BUILD_DIR")
    os.environ["PIPELINE_BUILD_DIR"] = str(build)
    try:
        from pipeline.build import BuildSpec, build_engine
        from pipeline.convert import ConvertSpec, convert
        from pipeline.download import DownloadSpec, download
        from pipeline.render import RenderSpec, render

        hf = download(DownloadSpec(source=f"local:{bigger_ckpt}")).path
        ckpt = convert(ConvertSpec(model=str(hf), quant="fp16")).path
        engine = build_engine(BuildSpec(gpu="cpu", checkpoint=hf, max_input_len=32, max_seq_len=64, max_batch_size=2)).engine_dir
        repo = render(RenderSpec(engine=engine, runtime="reference")).repo
    finally:
        if old is None:
            os.environ.pop("PIPELINE_BUILD_DIR", None)
        else:
            os.environ["PIPELINE_BUILD_DIR"] = old
    return {"build": build, "source": bigger_ckpt, "hf": hf, "ckpt": ckpt, "engine": engine, "repo": repo}


def test_download_local_killed(chain, tmp_path: Path, monkeypatch) -> None:
    _kill_rerun_check("download", ["download", f"local:{chain['source']}"], chain["hf"], chain["build"],
                      ["temp-created", "temp-has-files"], tmp_path, monkeypatch)


def test_download_local_killed_on_first_run_leaves_no_half_artifact(bigger_ckpt: Path, tmp_path: Path, monkeypatch) -> None:
    build = tmp_path / "build"
    dest = build / bigger_ckpt.name.lower() / "hf"
    hit = _interrupt("download-first", ["download", str(bigger_ckpt)], dest, build, "temp-has-files", tmp_path)
    if hit:
        assert not dest.exists() or is_up_to_date(dest, read_manifest(dest)["inputs_hash"])
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(build))
    assert run(["download", str(bigger_ckpt)]) == 0
    assert is_up_to_date(dest, read_manifest(dest)["inputs_hash"]) and not _leftovers(dest)
    RESULTS.append({"stage": "download (first run)", "point": "temp-has-files", "killed_mid_stage": hit,
                    "artifact_intact": "n/a (none before)", "rerun": "ok"})


def test_convert_killed(chain, tmp_path: Path, monkeypatch) -> None:
    _kill_rerun_check("convert", ["convert", "--model", str(chain["hf"]), "--quant", "fp16"], chain["ckpt"], chain["build"],
                      ["temp-created", "0.3s-in"], tmp_path, monkeypatch)


def test_build_cpu_killed(chain, tmp_path: Path, monkeypatch) -> None:
    _kill_rerun_check("build", ["build", "--gpu", "cpu", "--checkpoint", str(chain["hf"]), "--max-input-len", "32",
                                "--max-seq-len", "64", "--max-batch-size", "2"], chain["engine"], chain["build"],
                      ["temp-created", "temp-has-files"], tmp_path, monkeypatch)


def test_render_killed(chain, tmp_path: Path, monkeypatch) -> None:
    _kill_rerun_check("render", ["render", "--engine", str(chain["engine"]), "--runtime", "reference"], chain["repo"],
                      chain["build"], ["temp-created", "temp-has-files"], tmp_path, monkeypatch)


def test_download_gguf_killed(demo_hf_dir: Path, session_build_root: Path, tmp_path: Path, monkeypatch) -> None:
    """The demo GGUF conversion (tens of seconds) killed 3 s in; the session's demo checkpoint survives."""
    _kill_rerun_check("download-gguf", ["download", "demo"], demo_hf_dir, session_build_root, ["3s-in"], tmp_path,
                      monkeypatch)


# ------------------------------------------------------------------------------------------------
# kill -9 (or SIGTERM) of `pipeline serve` itself, while streams run: nothing it started may survive


def _active_streams(metrics_url: str) -> int:
    """The reference runtime's running requests (nv_trt_llm_request_metrics, request_type active)."""
    import re
    import urllib.request

    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    match = re.search(r'^nv_trt_llm_request_metrics\{[^}]*request_type="active"[^}]*\} (\S+)', text, re.M)
    return int(float(match.group(1))) if match else 0


@pytest.mark.server
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "SIGTERM"])
def test_serve_ended_under_streams_leaves_no_process_and_no_shared_memory(demo_repo: Path, tmp_path: Path,
                                                                             stop: signal.Signals) -> None:
    """`pipeline serve` of the reference runtime, 8 streams running, then `kill -9` (or SIGTERM, the
    orderly stop) of `pipeline serve`: within KILL_9_GONE_S (tests/serve_leftovers.py says why) of a kill -9,
    or 15 s of its exit after a SIGTERM, no process it started is left
    (tritonserver, every Python-backend stub, the reaper), and no /dev/shm region of its stubs. Before the
    reaper, after kill -9 the tensorrt_llm stub stayed for good (parent init, SIGTERM ignored, its
    watchdog waiting on the dead parent: pipeline/core/reaper.py), and so did its region."""
    import threading

    from pipeline.clients.triton import GenerateRequest, generate

    log = tmp_path / "tritonserver.log"
    proc = subprocess.Popen(pipeline_argv("--quiet", "serve", str(demo_repo), "--json", "--http-port", "0", "--grpc-port",
                                          "0", "--metrics-port", "0", "--no-warmup", "--exit-timeout", "5",
                                          "--log-file", str(log)),
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    started: list = []
    regions: list[Path] = []
    try:
        served = ready_json(proc)
        request = GenerateRequest(prompt="Tell me a long story about a lighthouse.", max_tokens=240, min_tokens=240,
                                  stream=True)
        for _ in range(8):
            threading.Thread(target=generate, args=(served["grpc_url"], "ensemble", request), kwargs={"timeout_s": 300},
                             daemon=True).start()
        deadline = time.monotonic() + 120
        while _active_streams(served["metrics_url"]) < 8 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # tokens flowing
        running = _active_streams(served["metrics_url"])
        started = started_by(proc.pid)  # tritonserver, its stubs, the reaper
        regions = stub_regions(started)
        assert running >= 4, f"only {running} streams running"
        assert len(regions) >= 5, f"stubs: {regions}"
        killed = time.monotonic()
        proc.send_signal(stop)
        proc.wait(timeout=60)  # SIGTERM: the exit timeout (5 s) for in-flight requests, then the stop
        # kill -9: KILL_9_GONE_S from the kill; SIGTERM: 15 s once serve has exited
        bound_s = KILL_9_GONE_S - (time.monotonic() - killed) if stop == signal.SIGKILL else 15.0
        left = still_there(started, within_s=max(0.0, bound_s), regions=regions)
        took = time.monotonic() - killed
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        remove_all(started, regions)  # never leave them behind, even when an assertion fails
    RESULTS.append({"stage": "serve", "point": f"{running} streams running", "signal": stop.name,
                    "processes": len(started), "regions": len(regions), "left": left, "took_s": round(took, 2)})
    assert not left, f"still running or in /dev/shm after {stop.name} ended pipeline serve ({took:.2f} s): {left}"

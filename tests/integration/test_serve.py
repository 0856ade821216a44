"""A real tritonserver (from nvidia-pytriton or PATH) serving the zero-work echo repository."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.errors import StageFailedError
from pipeline.serve import ServerSpec, start_server

pytestmark = [pytest.mark.triton, pytest.mark.slow]

ECHO_REPO = Path(__file__).resolve().parents[1] / "fixtures" / "echo_repo"


def test_echo_server_ready_warm_metrics_and_clean_stop(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with start_server(ServerSpec(repo=ECHO_REPO, log_file=log, ready_timeout_s=120)) as server:
        assert urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready").status == 200
        # the warm-up requests were answered before start_server returned; Triton counts a decoupled
        # request when its final response is released, so give the counter a moment to catch up
        expected = 'nv_inference_request_success{model="echo",version="1"} 2'
        deadline = time.monotonic() + 10
        while expected not in (metrics := urllib.request.urlopen(server.metrics_url).read().decode()):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert expected in metrics
        pid = server.pid
    assert server.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert "successfully loaded 'echo'" in log.read_text()


def test_failing_model_is_named_with_its_log_line(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ECHO_REPO, repo)
    broken = repo / "broken"
    shutil.copytree(repo / "echo", broken)
    (broken / "config.pbtxt").write_text((broken / "config.pbtxt").read_text().replace('name: "echo"', 'name: "broken"'))
    (broken / "1" / "model.py").write_text("import module_that_does_not_exist\n")
    with pytest.raises(StageFailedError) as caught:
        start_server(ServerSpec(repo=repo, log_file=tmp_path / "log.txt", ready_timeout_s=120))
    message = str(caught.value)
    assert "broken" in message and "module_that_does_not_exist" in message
    assert "echo:" not in message  # the healthy model is not blamed


def test_cli_serve_runs_until_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "cli.log"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("pipeline")), "--quiet", "serve", str(ECHO_REPO), "--json",
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--log-file", str(log), "--no-warmup"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    watchdog = threading.Timer(180, proc.kill)
    watchdog.start()
    try:
        first = proc.stdout.readline()  # the JSON result is printed once the server is ready
        assert first.startswith("{"), proc.stderr.read()
        while not first.endswith("}\n"):
            first += proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    out = json.loads(first)
    assert proc.returncode == 0, err
    assert out["grpc_url"].startswith("127.0.0.1:") and out["log_file"] == str(log)

"""A real tritonserver (from nvidia-pytriton or PATH) serving the zero-work echo repository."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from serve_leftovers import KILL_9_GONE_S, ready_json, remove_all, started_by, still_there, stub_regions

from pipeline.core.errors import StageFailedError
from pipeline.serve import ServerSpec, start_server

pytestmark = pytest.mark.server  # the zero-work echo repository: no model

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


def _sigint_as_in_a_terminal() -> None:
    # A run started in the background by a non-interactive shell (`make test &`, nohup) inherits SIGINT ignored,
    # and Python then installs no Ctrl-C handler: the child gets the disposition a foreground `pipeline serve` has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli_serve(log: Path, repo: Path = ECHO_REPO) -> subprocess.Popen:
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("pipeline")), "--quiet", "serve", str(repo), "--json",
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--log-file", str(log), "--no-warmup"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_in_a_terminal,
    )


@contextmanager
def _served(log: Path) -> Iterator[tuple[subprocess.Popen, dict, list[psutil.Process], list[Path]]]:
    """`pipeline serve` of the echo repository, ready: (its process, its JSON, what it started, the stubs'
    regions); afterwards whatever is left is removed, whatever the test found."""
    proc = _cli_serve(log)
    watchdog = threading.Timer(180, proc.kill)
    watchdog.start()
    tree: list[psutil.Process] = []
    regions: list[Path] = []
    try:
        out = ready_json(proc)
        tree = started_by(proc.pid)
        regions = stub_regions(tree)
        assert len(tree) >= 3 and regions, "no Python-backend stub under tritonserver, or no reaper"
        assert all(region.exists() for region in regions)
        yield proc, out, tree, regions
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        remove_all(tree, regions)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_cli_serve_runs_until_sigterm(tmp_path: Path, stop: signal.Signals) -> None:
    """SIGTERM or Ctrl-C is the orderly stop: exit 0, tritonserver, its stubs, their /dev/shm regions and
    the reaper gone."""
    log = tmp_path / "cli.log"
    with _served(log) as (proc, out, tree, regions):
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=60)
        left = still_there(tree, within_s=1.0, regions=regions)
    assert proc.returncode == 0, err
    assert out["grpc_url"].startswith("127.0.0.1:") and out["log_file"] == str(log)
    assert not left, f"still running after pipeline serve stopped: {left}"


def test_kill_9_of_cli_serve_takes_the_server_and_its_stubs_along(tmp_path: Path) -> None:
    """No orphans: `kill -9` of `pipeline serve` (no Python clean-up can run) ends tritonserver through
    its parent-death signal, and the server's reaper ends its stubs and removes their /dev/shm regions
    (tests/reliability/test_interruption.py does the same with streams running)."""
    with _served(tmp_path / "cli.log") as (proc, _, tree, regions):
        killed = time.monotonic()
        proc.kill()
        proc.wait(timeout=10)
        left = still_there(tree, within_s=KILL_9_GONE_S, regions=regions)
        took = time.monotonic() - killed
    print(f"tritonserver, {len(regions)} stub(s) and the reaper gone {took:.2f} s after kill -9 of pipeline serve")
    assert not left, f"still running (or still in /dev/shm) {KILL_9_GONE_S} s after kill -9 of pipeline serve: {left}"


def test_a_crashed_tritonserver_leaves_no_stub_and_no_shared_memory(tmp_path: Path) -> None:
    """tritonserver dies (kill -9 of tritonserver alone, as a crash): `pipeline serve` exits 1 naming it, and
    the stubs, the reaper and every /dev/shm region of the server are gone."""
    with _served(tmp_path / "cli.log") as (proc, out, tree, regions):
        os.kill(out["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        left = still_there(tree, within_s=5.0, regions=regions)
    assert proc.returncode == 1 and "exited on its own" in err, err
    assert not left, f"still running (or still in /dev/shm) after tritonserver crashed: {left}"


def test_sigterm_while_starting_exits_143_and_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM before the server is ready: exit 128+15, the half-started server stopped."""
    proc = _cli_serve(tmp_path / "cli.log")
    tree: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not tree and time.monotonic() < deadline:
            tree = psutil.Process(proc.pid).children()  # tritonserver appeared, not ready yet
            time.sleep(0.02)
        assert tree, "tritonserver never started"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        left = still_there(tree, within_s=1.0)
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_all(tree)
    assert proc.returncode == 143, err
    assert "Terminated" in err
    assert not left, f"still running: {left}"

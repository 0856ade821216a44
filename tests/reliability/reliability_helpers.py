"""Helpers shared by the reliability tests (not fixtures): the CLI as a child process, kill -9 at a point
seen from outside, and the reference runtime's own metrics."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def pipeline_argv(*args: str) -> list[str]:
    """The CLI as a child process of this interpreter (no reliance on PATH)."""
    return [sys.executable, "-c", "import sys; from pipeline.cli import run; sys.exit(run(sys.argv[1:]))", *args]


def child_env(build: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PIPELINE_BUILD_DIR": str(build), "PYTHONUNBUFFERED": "1", **extra}
    env.pop("PIPELINE_DEBUG", None)
    return env


def kill_when(process: subprocess.Popen, ready, *, timeout_s: float = 300.0, poll_s: float = 0.02) -> bool:
    """SIGKILL the child's whole process group as soon as ready() is true; False if it ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if ready():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            return True
        time.sleep(poll_s)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    raise AssertionError(f"the child never reached the kill point within {timeout_s:.0f} s")


def runtime_metrics(server) -> dict[str, float]:
    """{"active": .., "waiting": .., "max": .., "kv_used": .., "kv_free": .., "kv_max": ..} of tensorrt_llm
    (refreshed by the model every stats_check_period_ms, 100 ms as rendered)."""
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    found = {}
    for family, kind, value in re.findall(
            r'^nv_trt_llm_(request|kv_cache_block)_metrics\{[^}]*(?:request_type|kv_cache_block_type)="(\w+)"[^}]*\} (\S+)',
            text, re.M):
        found[("kv_" if family == "kv_cache_block" else "") + kind] = float(value)
    assert {"active", "waiting", "kv_used", "kv_max"} <= set(found), f"runtime metrics missing: {found}"
    return found


def wait_busy(server, active: int, kv_used: int, timeout_s: float = 10.0) -> dict[str, float]:
    """The runtime's metrics once at least `active` requests run holding at least `kv_used` blocks (the
    metrics are refreshed every 100 ms, so they may lag the first tokens a little)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = runtime_metrics(server)
        if metrics["active"] >= active and metrics["kv_used"] >= kv_used:
            return metrics
        if time.monotonic() > deadline:
            raise AssertionError(f"never {active} requests running on {kv_used} KV blocks: {metrics}")
        time.sleep(0.05)

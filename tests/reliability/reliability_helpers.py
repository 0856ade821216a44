"""Helpers shared by the reliability tests (not fixtures): the CLI as a child process, and kill -9
at a point seen from outside."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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

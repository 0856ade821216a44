"""Run a build tool in a child process: log streamed to a file, wall time, peak memory, exit code.

The child gets its own process group, so an interrupted build takes its workers with it; its GPU
memory is surely freed when it exits. The exit code is always checked by the caller.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import psutil

from pipeline.core.processes import spawn

SAMPLE_S = 0.25


@dataclass(frozen=True)
class RunResult:
    returncode: int
    duration_s: float
    peak_rss_mib: float
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.log_path, lines)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _tree_rss(process: psutil.Process) -> int:
    total = 0
    try:
        procs = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def run_logged(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> RunResult:
    """Run argv, appending its stdout+stderr to log_path line by line; return exit code, time and the
    peak resident memory of its whole process tree (sampled). env is the child's whole environment
    (default: this process's)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    peak = 0
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        child = spawn(  # dies with this process (parent-death signal), its group is stopped on errors
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ) if env is None else env, cwd=cwd, text=True, errors="replace", bufsize=1,
            start_new_session=True,
        )
        done = threading.Event()
        try:
            watched = psutil.Process(child.pid)
        except psutil.Error:
            watched = None

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                if watched is not None:
                    peak = max(peak, _tree_rss(watched))
                done.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            assert child.stdout is not None
            for line in child.stdout:
                log.write(line)
                log.flush()
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            returncode = child.wait()
        except BaseException:
            _kill_group(child)
            raise
        finally:
            done.set()
            sampler.join(timeout=2)
        log.write(f"# exit code {returncode} after {time.monotonic() - started:.1f} s\n")
    return RunResult(returncode=returncode, duration_s=round(time.monotonic() - started, 3),
                     peak_rss_mib=round(peak / (1 << 20), 1), log_path=log_path)


def _kill_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGTERM)
        child.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

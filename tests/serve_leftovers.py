"""`pipeline serve` as a child process: its JSON once ready, what it started, and what of that is left
after it ended. Shared by the serve tests (tests/integration/test_serve.py) and the kill tests
(tests/reliability/test_interruption.py)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil

SHM = Path("/dev/shm")

# After `kill -9` of `pipeline serve`, everything it started is gone within this many seconds; README.md
# quotes the same number. Why 2 s: nothing in the path polls or waits. The kernel sends tritonserver its
# parent-death signal and closes the reaper's lifeline the moment the process dies; the reaper, blocked
# on that pipe, SIGKILLs what is left and unlinks the regions (milliseconds). What remains is scheduling
# on a busy 2-core machine (8 streams decoding), which 2 s covers with margin. A stub left to its own
# watchdog never goes (pipeline/core/reaper.py), so any real regression exceeds this bound by far.
KILL_9_GONE_S = 2.0


def ready_json(serve: subprocess.Popen) -> dict:
    """The JSON `pipeline serve --json` prints once the server is ready (stdout a text pipe)."""
    text = serve.stdout.readline()
    assert text.startswith("{"), text + (serve.stderr.read() if serve.stderr else "")
    while not text.rstrip().endswith("}"):
        text += serve.stdout.readline()
    return json.loads(text)


def started_by(serve_pid: int) -> list[psutil.Process]:
    """Everything the process started: tritonserver, its Python-backend stubs, the server's reaper."""
    return psutil.Process(serve_pid).children(recursive=True)


def stub_regions(processes: list[psutil.Process]) -> list[Path]:
    """The /dev/shm region of each Python-backend stub: its argv[2] (python_backend r24.10 @01d0ad82
    src/stub_launcher.cc:378-382)."""
    found = []
    for process in processes:
        try:
            argv = process.cmdline()
        except psutil.NoSuchProcess:
            continue
        if argv and argv[0].endswith("triton_python_backend_stub") and len(argv) > 2:
            found.append(SHM / argv[2])
    return found


def still_there(processes: list[psutil.Process], within_s: float, regions: list[Path] = ()) -> list[str]:
    """Those of processes still running (zombies count as gone) and of regions those still in /dev/shm,
    after within_s (sooner when none is)."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{process.pid} {process.name()} (parent {process.ppid()})")
            except psutil.NoSuchProcess:
                pass
        left += [str(region) for region in regions if region.exists()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def remove_all(processes: list[psutil.Process], regions: list[Path] = ()) -> None:
    """SIGKILL the processes and unlink the regions: a failed test leaves nothing behind either."""
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    for region in regions:
        region.unlink(missing_ok=True)

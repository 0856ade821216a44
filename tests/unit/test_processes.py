"""pipeline.processes: children die with the process that started them; SIGTERM unwinds like Ctrl-C.

Real processes, real signals: a Python parent spawns `sleep`, the parent is SIGKILLed, the sleep must be
gone within a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from pipeline.processes import Terminated, parent_death_signal_supported, spawn, terminate_as_interrupt

pytestmark = pytest.mark.skipif(not parent_death_signal_supported(), reason="PR_SET_PDEATHSIG is Linux-only")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:  # dead, waiting for init to reap it
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _parent_that_spawns(from_thread: bool) -> tuple[subprocess.Popen, int]:
    """A Python process that spawns `sleep 60` (from a short-lived thread when asked) and prints its pid."""
    code = textwrap.dedent(f"""
        import subprocess, threading, time
        from pipeline.processes import spawn
        box = []
        def start():
            box.append(spawn(["sleep", "60"], stdin=subprocess.DEVNULL))
        if {from_thread}:
            worker = threading.Thread(target=start); worker.start(); worker.join()  # the thread is gone now
        else:
            start()
        print(box[0].pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline()
    assert line.strip().isdigit(), line
    return parent, int(line)


@pytest.mark.parametrize("from_thread", [False, True], ids=["main-thread", "exited-thread"])
def test_child_dies_with_its_parent_not_with_the_thread(from_thread: bool) -> None:
    parent, child = _parent_that_spawns(from_thread)
    try:
        time.sleep(0.3)
        assert psutil.Process(child).is_running(), "the child died with the thread that asked for it"
        parent.kill()  # kill -9: no Python clean-up runs in the parent
        parent.wait()
        assert _gone(child, within_s=1.0), "the child outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_spawn_refuses_a_preexec_fn_of_its_own() -> None:
    with pytest.raises(TypeError):
        spawn(["true"], preexec_fn=lambda: None)


def test_sigterm_raises_terminated_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught:
        with terminate_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler
    assert caught.value.exit_code == 143
    assert not isinstance(caught.value, Exception)  # `except Exception` clean-ups do not swallow it
    assert signal.getsignal(signal.SIGTERM) == before


def test_terminate_as_interrupt_is_a_no_op_off_the_main_thread() -> None:
    seen: list[object] = []

    def body() -> None:
        with terminate_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]

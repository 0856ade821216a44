"""pipeline.core.processes: children die with the process that started them; SIGTERM unwinds like Ctrl-C.

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

from pipeline.core.processes import Terminated, parent_death_signal_supported, spawn, terminate_as_interrupt

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
        from pipeline.core.processes import spawn
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


def test_spawn_runs_no_python_between_fork_and_exec(monkeypatch) -> None:
    """A preexec_fn runs Python in the forked child of a process with threads, which CPython's subprocess
    documentation warns can deadlock. The child sets its parent-death signal after a fresh exec instead,
    and the command it becomes keeps the pid Popen returned."""
    seen: list[dict] = []
    real = subprocess.Popen

    class Recording(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            seen.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    process = spawn(["sh", "-c", "echo $$"], stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=30)
    assert seen and all(kwargs.get("preexec_fn") is None for kwargs in seen)
    assert int(out) == process.pid and process.returncode == 0


def test_spawn_of_a_missing_command_raises_as_popen_does() -> None:
    with pytest.raises(FileNotFoundError):
        spawn(["no-such-command-here-0x1"])


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


# A stand-in for tritonserver and what it leaves: a child in its group that ignores SIGTERM (as a Python
# stub does), a process in a session of its own whose command line carries the server's token (as a stub
# or an mpirun rank elsewhere would), and a /dev/shm file named by the token (a stub's region).
FAKE_SERVER = """
trap '' TERM
bash -c "trap '' TERM; sleep 60" &
in_group=$!
setsid "$2" -c 'import time; time.sleep(60)' "$1" &
elsewhere=$!
: > /dev/shm/"$1"region
echo $$ $in_group $elsewhere
wait
"""


def _token() -> str:
    import secrets

    return f"pipeline_test_{secrets.token_hex(8)}_"


def _start_fake_server(token: str):
    from pipeline.core.processes import spawn

    process = spawn(["bash", "-c", FAKE_SERVER, "fake-server", token, sys.executable], start_new_session=True,
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in process.stdout.readline().split()]
    assert len(pids) == 3, pids
    return process, pids


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _left(pids: list[int], token: str, within_s: float) -> tuple[list[int], bool]:
    """Those of pids still running, and whether the token's /dev/shm file is still there, after within_s."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [pid for pid in pids if _running(pid)]
        region = os.path.exists(f"/dev/shm/{token}region")
        if (not alive and not region) or time.monotonic() > deadline:
            return alive, region
        time.sleep(0.05)


def _kill_all(pids: list[int], token: str) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.unlink(f"/dev/shm/{token}region")
    except FileNotFoundError:
        pass


def test_stop_kills_what_the_server_left_and_removes_its_shared_memory(tmp_path) -> None:
    from pipeline.core.processes import ServerProcess

    token = _token()
    process, pids = _start_fake_server(token)
    server = ServerProcess(process, tmp_path / "server.log", ["fake-server"], token=token)
    try:
        assert os.path.exists(f"/dev/shm/{token}region")
        server.stop(timeout_s=0.5)  # the server ignores SIGTERM: the group gets SIGKILL after 0.5 s
        alive, region = _left(pids, token, within_s=0)  # stop() returns when all is gone
        assert server.reaper.process.wait(timeout=5) == 0
    finally:
        _kill_all(pids, token)
    assert not alive, f"still running after stop(): {alive}"
    assert not region, "the server's /dev/shm region is still there after stop()"


def test_kill_9_of_the_owner_leaves_no_process_and_no_shared_memory(tmp_path) -> None:
    """The owner of a ServerProcess is SIGKILLed (no clean-up of its own runs): the server dies by its
    parent-death signal, and the reaper kills what it left (in its group and elsewhere) and removes its
    /dev/shm region, then exits."""
    token = _token()
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, sys.argv[3])
        from test_processes import _start_fake_server
        from pipeline.core.processes import ServerProcess
        process, pids = _start_fake_server(sys.argv[1])
        server = ServerProcess(process, Path(sys.argv[2]), ["fake-server"], token=sys.argv[1])
        print(*pids, server.reaper.process.pid, flush=True)
        time.sleep(60)
    """)
    owner = subprocess.Popen([sys.executable, "-c", code, token, str(tmp_path / "server.log"), os.path.dirname(__file__)],
                             stdout=subprocess.PIPE, text=True)
    line = owner.stdout.readline()
    pids = [int(pid) for pid in line.split()]
    try:
        assert len(pids) == 4, line
        assert os.path.exists(f"/dev/shm/{token}region")
        owner.kill()
        owner.wait()
        alive, region = _left(pids, token, within_s=10)
    finally:
        if owner.poll() is None:
            owner.kill()
        _kill_all(pids, token)
    assert not alive, f"still running 10 s after kill -9 of the owner (server, in its group, elsewhere, reaper): {alive}"
    assert not region, "the server's /dev/shm region outlived the owner"
    assert "pipeline reaper: the server's owner is gone" in (tmp_path / "server.log").read_text()

"""Child processes that die with the pipeline, and SIGTERM as an orderly stop.

`spawn` starts a child with the Linux parent-death signal (prctl PR_SET_PDEATHSIG): when the process
that started it dies, even by `kill -9`, the kernel sends the child that signal. The child sets it
itself, in a small exec wrapper (a fresh interpreter that calls prctl and execs the command), never in
a preexec_fn. The signal fires when
the *thread* that forked the child exits, not the process, so every child is forked from one daemon
thread that lives as long as the process (a server started from a short-lived worker thread would
otherwise die with that thread).

The parent-death signal reaches only the server itself, not what it started, and tritonserver's Python
stubs do not reliably follow it (they ignore SIGTERM, and their own watch on their parent can hang for
ever: pipeline.core.reaper says where). So every ServerProcess also starts a reaper (pipeline.core.reaper), a
small process that outlives its owner only long enough to SIGKILL what is left of the server (its
process group, and every process whose command line carries the server's token) and unlink the
server's /dev/shm regions. stop() does the same itself after the orderly stop.

`terminate_as_interrupt` turns SIGTERM into `Terminated` (a BaseException, as KeyboardInterrupt), so `with start_server(...)`
blocks and `atomic_dir` clean-ups run on `kill PID` / CI cancellation exactly as on Ctrl-C.
"""

from __future__ import annotations

import errno
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from pipeline.core import reaper

_PR_SET_PDEATHSIG = 1


class Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C (servers stop, temporary folders go), exit 128 + 15. A
    BaseException, like KeyboardInterrupt, so `except Exception` does not swallow it; not a
    KeyboardInterrupt, which Typer turns into exit 130."""

    exit_code = 128 + signal.SIGTERM


_LINUX = sys.platform.startswith("linux")  # prctl(PR_SET_PDEATHSIG) is Linux's


def parent_death_signal_supported() -> bool:
    return _LINUX


# The child asks for its parent-death signal itself, in a fresh single-threaded interpreter that then execs
# the command (the signal survives execve; pid and process group stay the child's). No preexec_fn: code
# between fork and exec in a process with threads can deadlock (CPython's subprocess docs say so), and
# this process has threads (the spawner, the reaper's, a server's log readers).
# argv: death signal, the parent's pid, the command. If the parent already died, die now.
_TIE_AND_EXEC = (
    "import ctypes, os, sys\n"
    "sig, parent, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]\n"
    f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, sig, 0, 0, 0)\n"
    "if os.getppid() != parent:\n"
    "    os.kill(os.getpid(), sig)\n"
    "os.execvp(argv[0], argv)\n"
)


def _tied_argv(argv: Sequence[str], death_signal: int, env: Mapping[str, str] | None) -> list[str]:
    """The command line that runs argv with death_signal tied to this process. A command that is not
    found raises FileNotFoundError here, as Popen would."""
    command = list(argv)
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    relative = command and "/" in command[0] and not os.path.isabs(command[0])  # found from Popen's cwd
    if not command or (not relative and shutil.which(command[0], path=path) is None):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", command[0] if command else "")
    return [sys.executable, "-I", "-S", "-c", _TIE_AND_EXEC, str(int(death_signal)), str(os.getpid()), *command]


class _Spawner:
    """One daemon thread that forks every child, so a child's parent-death signal is tied to the life
    of the process rather than to whichever thread asked for it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen], Future]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._owner_pid = 0
        self._lock = threading.Lock()

    def _ensure_thread(self) -> None:
        with self._lock:
            # a forked copy of this process has no spawner thread: start its own
            if self._thread is None or not self._thread.is_alive() or self._owner_pid != os.getpid():
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, name="pipeline-spawner", daemon=True)
                self._owner_pid = os.getpid()
                self._thread.start()

    def _run(self) -> None:
        while True:
            make, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(make())
                except BaseException as error:  # noqa: BLE001 - handed back to the caller
                    future.set_exception(error)

    def popen(self, make: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        self._ensure_thread()
        future: Future = Future()
        self._jobs.put((make, future))
        return future.result()


_SPAWNER = _Spawner()


def spawn(argv: Sequence[str], *, death_signal: int = signal.SIGKILL, **popen_kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(argv, **popen_kwargs) for a child that gets death_signal when this process dies
    (Linux; elsewhere a plain Popen). Keep start_new_session=True in popen_kwargs to stop the child's
    whole group later; a preexec_fn of the caller's is not accepted."""
    if "preexec_fn" in popen_kwargs or "executable" in popen_kwargs:
        raise TypeError("spawn runs the command through its own exec wrapper: no preexec_fn, no executable")
    if not _LINUX:
        return subprocess.Popen(list(argv), **popen_kwargs)
    command = _tied_argv(argv, death_signal, popen_kwargs.get("env"))
    return _SPAWNER.popen(lambda: subprocess.Popen(command, **popen_kwargs))


def spawn_logged(argv: Sequence[str], log_file: Path, *, env: dict[str, str], death_signal: int) -> subprocess.Popen:
    """A server process in its own session, tied to this one (spawn), writing stdout and stderr to log_file, whose
    first line is the command line (`# ...`); stdin closed. The log file's folder is created."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "wb") as log:
        log.write(("# " + " ".join(argv) + "\n").encode())
        log.flush()
        return spawn(argv, death_signal=death_signal, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     env=env, start_new_session=True)


def start_as_daemons(start: Callable[[], None]) -> None:
    """Call start() on a short-lived daemon thread and wait for it: the threads start() creates without
    saying are daemons then (a Thread's daemon flag defaults to that of the thread creating it), so they
    never keep the interpreter alive at exit (a Python-backend stub whose model was finalized, say)."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            start()
        except BaseException as failure:  # noqa: BLE001 - raised again in the caller
            failures.append(failure)

    starter = threading.Thread(target=run, name="daemon-starter", daemon=True)
    starter.start()
    starter.join()
    if failures:
        raise failures[0]


def _raise_terminated(signum: int, frame: object) -> None:  # noqa: ARG001
    raise Terminated()


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated in the main thread (elsewhere: no change)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminate_group(process: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM the process (a server stops what it started), wait up to timeout_s, then SIGKILL its whole
    process group (it was started with start_new_session=True)."""
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=timeout_s)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if process.poll() is None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class Reaper:
    """The reaper of one server (pipeline.core.reaper): started beside it, in a session of its own and not tied
    to this process, so it outlives a `kill -9` of this process; it acts once its lifeline, a pipe whose
    write end only this process holds, is closed (by release(), or by the kernel when this process dies)."""

    def __init__(self, group: int, token: str | None, log_file: Path | None) -> None:
        self.group, self.token = group, token
        command = [sys.executable, "-I", reaper.__file__, "--group", str(group)]
        # the token goes in the environment: a command line carrying it marks a process of the server's
        env = {**os.environ, reaper.TOKEN_VARIABLE: token} if token else None
        self.process: subprocess.Popen | None = None
        self._lifeline = -1
        try:
            read_end, self._lifeline = os.pipe()  # both close-on-exec: no other child inherits the write end
            try:
                with open(log_file, "ab") if log_file else open(os.devnull, "wb") as log:
                    self.process = subprocess.Popen(command, stdin=read_end, stdout=subprocess.DEVNULL, stderr=log,
                                                    env=env, start_new_session=True)
            finally:
                os.close(read_end)
        except OSError:  # no reaper: stop() still cleans up; only a kill -9 of this process would leave things
            pass

    def release(self, timeout_s: float = 15.0) -> None:
        """After this process cleaned up itself: close the lifeline; the reaper checks once more and exits."""
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        if self.process is not None:
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def stop_server(process: subprocess.Popen, timeout_s: float, server_reaper: Reaper) -> None:
    """terminate_group, then SIGKILL for what the server left outside its group and unlink of its shared
    memory (pipeline.core.reaper.reap), then release its reaper."""
    try:
        terminate_group(process, timeout_s)
        reaper.reap(server_reaper.group, server_reaper.token)
    finally:
        server_reaper.release()


class ServerProcess:
    """A started server in its own process group, with its log file and its reaper: a context manager that
    stops it, and a finalizer that stops it if it is dropped unstopped. Subclasses say how long an orderly
    stop may take. token: a string in the command line of every process the server starts and in the name
    of every /dev/shm region it creates (pipeline.serve's shm-region prefix); None for servers without one."""

    def __init__(self, process: subprocess.Popen, log_file: Path, command: list[str], *,
                 token: str | None = None) -> None:
        self.process = process
        self.log_file = log_file
        self.command = command
        self.started_unix = time.time()
        self.ready_s: float | None = None
        self.reaper = Reaper(process.pid, token, log_file)
        self._finalizer = weakref.finalize(self, stop_server, process, 5.0, self.reaper)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the server exits (or timeout); returns its exit code or None."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = Path(self.log_file).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop_timeout_s(self) -> float:
        return 30.0

    def stop(self, timeout_s: float | None = None) -> int | None:
        """Stop the server and everything it started: SIGTERM, then SIGKILL for the whole process group after
        timeout_s (default: stop_timeout_s()), then its leftovers and shared memory (stop_server). Safe to
        call twice."""
        if self._finalizer.alive:
            self._finalizer.detach()
            stop_server(self.process, self.stop_timeout_s() if timeout_s is None else timeout_s, self.reaper)
        return self.process.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

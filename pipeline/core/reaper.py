"""What a server leaves when its owner dies: its process group, Python-backend stubs, shared memory.

`python -I reaper.py --group PGID`, with the token in $PIPELINE_REAPER_TOKEN (started by pipeline.core.processes.ServerProcess, standard
library only) waits for end of file on its stdin, a pipe whose write end only the owner holds: the owner
closes it after an orderly stop, and the kernel closes it when the owner dies, even by `kill -9`. (It
also ends when the server's group is empty: a group id that no longer exists may be reused.) Then
`reap` runs: SIGKILL for the server's process group and for every process of this user whose command
line carries the server's token, until none is left, and unlink of the /dev/shm files named by the
token. The owner runs the same `reap` itself after an orderly stop; a second pass finds nothing.

Why it is needed (triton-inference-server/python_backend r24.10 @01d0ad82, the Triton 2.51 of
nvidia-pytriton 0.7; r25.12 @397eddfc has the same code):
- a stub ignores SIGTERM and SIGINT: its handler does nothing (src/pb_stub.cc:80-84, 2063-2064);
- a stub notices its parent's death on a watchdog thread every 300 ms (pb_stub.cc:2126-2152,
  `kill(ppid, 0)` at 2046-2049), which first joins the stub-to-parent thread (1068-1078, taking
  stub_to_parent_message_mu_ at 1072). That thread holds the same mutex (1093) while it waits,
  without a timeout, for the parent to answer a log line, a clean-up id or an `is_cancelled()`
  (1126-1156, 1159-1190, 1212-1238): when the parent died with such a message unanswered, the
  watchdog blocks for ever and the stub never exits. Seen here: the reference `tensorrt_llm` stub
  after kill -9 of `pipeline serve` under 8 streams, parent init, ~1.2 GB, its watchdog in
  TerminateStubToParentQueueMonitor and the monitor in SendIsCancelled; a thread in `Metric.set`
  held the GIL (metric.cc:187-203 does not release it, observe does at 208), so no Python code of
  the model could run again either;
- the parent creates each stub's region, `/dev/shm/<shm-region-prefix-name><uuid>` of 1 MiB by
  default (stub_launcher.cc:81-82, 136-138; python_be.cc:1977, 1984-1985, 2049-2059), and a stub
  removes it only when it exits on its own (shm_manager.cc:138, 228-232): after SIGKILL it stays.
Stubs are forked by tritonserver without setsid or setpgid (stub_launcher.cc:412-420), so they are in
its process group; the token (pipeline.serve gives every server its own shm-region prefix) also finds
stubs and ranks in other groups: a stub's argv[2] is its region name (stub_launcher.cc:378-382).
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")  # boost.interprocess shared_memory_object on Linux: shm_open(3) names live here
PROC = Path("/proc")
TOKEN_VARIABLE = "PIPELINE_REAPER_TOKEN"  # not on the command line: there it would mark the reaper as the server's
SETTLE_S = 10.0  # how long reap keeps killing (and waiting for SIGKILLed processes to go)


def _processes() -> list[tuple[int, str, int, int, bytes]]:
    """(pid, state, process group, uid, command line) of every process /proc shows; [] without /proc."""
    found = []
    try:
        entries = [entry for entry in os.listdir(PROC) if entry.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            stat = (PROC / entry / "stat").read_text()
            cmdline = (PROC / entry / "cmdline").read_bytes()
            uid = os.stat(PROC / entry).st_uid
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        found.append((int(entry), fields[0], int(fields[2]), uid, cmdline))
    return found


def leftovers(group: int, token: str | None) -> list[int]:
    """Live (not zombie) processes of this user in the group or whose command line contains the token."""
    me, uid = os.getpid(), os.getuid()
    needle = token.encode() if token else None
    return [pid for pid, state, pgrp, owner, cmdline in _processes()
            if pid != me and state != "Z" and owner == uid
            and (pgrp == group or (needle is not None and needle in cmdline))]


def regions(token: str | None) -> list[Path]:
    if not token:
        return []
    try:
        return sorted(SHM_DIR / name for name in os.listdir(SHM_DIR) if name.startswith(token))
    except OSError:
        return []


def reap(group: int, token: str | None, settle_s: float = SETTLE_S) -> tuple[list[int], list[str]]:
    """SIGKILL what is left of the server (see leftovers) until nothing is, then unlink its /dev/shm
    regions. Returns the pids killed and the regions removed."""
    killed: set[int] = set()
    deadline = time.monotonic() + settle_s
    while True:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        left = leftovers(group, token)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    removed = []
    for path in regions(token):
        try:
            path.unlink()
            removed.append(path.name)
        except OSError:
            pass
    return sorted(killed), removed


def wait_for_owner(group: int, poll_s: float = 1.0) -> bool:
    """Block until the owner closes the lifeline on stdin (True) or the server's group is empty (False)."""
    while True:
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], poll_s)
        if ready:
            if not os.read(sys.stdin.fileno(), 4096):
                return True
            continue
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, required=True, help="the server's process group")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_VARIABLE) or None
    if args.group <= 1 or (token is not None and len(token) < 16):
        parser.error(f"refusing a group <= 1 or a ${TOKEN_VARIABLE} shorter than 16 characters")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the owner
    owner_gone = wait_for_owner(args.group)
    killed, removed = reap(args.group, token)
    if killed or removed:
        why = "the server's owner is gone" if owner_gone else "the server is gone"
        print(f"pipeline reaper: {why}; killed {len(killed)} process(es) it left "
              f"({' '.join(map(str, killed)) or '-'}), removed {len(removed)} shared-memory region(s)",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

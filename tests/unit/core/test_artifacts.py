"""Atomic artifact folders, manifests and path safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pipeline.core.artifacts import (
    ArtifactOrigin,
    atomic_dir,
    build_manifest,
    folder_hash,
    is_up_to_date,
    read_manifest,
    reusable,
    set_verify,
    verify_enabled,
    write_json_atomic,
)
from pipeline.core.errors import InvalidInputError
from pipeline.core.paths import model_dir, model_slug, new_log_file, safe_name, stage_dir


def _write_good(dest: Path, text: str) -> None:
    with atomic_dir(dest) as tmp:
        (tmp / "weights.bin").write_text(text)
        write_json_atomic(tmp / "manifest.json", build_manifest(ArtifactOrigin("t", {"v": text}, text), tmp, time.time()))


def test_failed_stage_leaves_previous_artifact_untouched(tmp_path):
    dest = tmp_path / "artifact"
    _write_good(dest, "v1")
    before = folder_hash(dest)
    with pytest.raises(RuntimeError):
        with atomic_dir(dest) as tmp:
            (tmp / "weights.bin").write_text("half")
            raise RuntimeError("boom")
    assert folder_hash(dest) == before
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_success_replaces_and_up_to_date_detects_corruption(tmp_path):
    dest = tmp_path / "artifact"
    _write_good(dest, "v1")
    _write_good(dest, "v2")
    assert (dest / "weights.bin").read_text() == "v2"
    assert is_up_to_date(dest, "v2") and not is_up_to_date(dest, "v1")
    (dest / "weights.bin").write_text("v3")  # same size, different content
    assert not is_up_to_date(dest, "v2")


def test_kill_9_mid_write_never_damages_the_good_artifact(tmp_path):
    dest = tmp_path / "artifact"
    _write_good(dest, "good")
    before = folder_hash(dest)
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from pipeline.core.artifacts import atomic_dir
        with atomic_dir(Path({str(dest)!r})) as tmp:
            (tmp / "weights.bin").write_text("partial")
            print("writing", flush=True)
            time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert folder_hash(dest) == before
    assert any(p.name.startswith(".artifact.tmp-") for p in tmp_path.iterdir())
    _write_good(dest, "next")  # the next run cleans the dead run's leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact"]


def test_orphaned_old_folder_is_restored(tmp_path):
    dest = tmp_path / "artifact"
    _write_good(dest, "good")
    os.replace(dest, tmp_path / ".artifact.old-abc123")  # killed between the two renames
    with pytest.raises(RuntimeError):
        with atomic_dir(dest):
            raise RuntimeError("fail again")
    assert (dest / "weights.bin").read_text() == "good"


@pytest.mark.parametrize("bad", ["..", "../etc", "a/b", "", ".hidden", "x" * 200, "a\\..\\b", "/abs"])
def test_unsafe_names_are_refused(bad):
    with pytest.raises(InvalidInputError):
        safe_name(bad)


def test_model_dirs_stay_under_the_build_root(tmp_path):
    assert model_dir("demo", tmp_path) == tmp_path.resolve() / "demo"
    assert stage_dir("demo", "engines", "abc", tmp_path).parent.parent == tmp_path.resolve() / "demo"
    assert model_slug("HuggingFaceTB/SmolLM2-135M-Instruct") == "huggingfacetb-smollm2-135m-instruct"
    assert model_slug("../../etc/passwd") == "etc-passwd"
    with pytest.raises(InvalidInputError):
        model_dir("..", tmp_path)


def test_each_server_start_gets_its_own_log_file_under_build_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    first, second = new_log_file("tritonserver"), new_log_file("tritonserver")
    assert first != second and first.parent == second.parent == tmp_path.resolve() / "logs"
    assert first.name.startswith("tritonserver-") and first.suffix == ".log"


# --- re-runs that scale: size + mtime, hashes only with --verify -------------------------------------


def _aged_artifact(dest: Path, content: bytes, age_s: float = 3600) -> Path:
    """An artifact whose file was written age_s ago (outside the racy window of its manifest)."""
    with atomic_dir(dest) as tmp:
        (tmp / "weights.bin").write_bytes(content)
        old = time.time() - age_s
        os.utime(tmp / "weights.bin", (old, old))
        write_json_atomic(tmp / "manifest.json", build_manifest(ArtifactOrigin("t", {}, "h"), tmp, time.time()))
    return dest / "weights.bin"


def _rewrite_keeping_size_and_mtime(path: Path, content: bytes) -> None:
    stat = path.stat()
    path.write_bytes(content)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_no_op_check_reads_size_and_mtime_only_and_verify_hashes(tmp_path):
    """A same-size rewrite that keeps the mtime is invisible without --verify (the file is not read),
    and found with it: the documented trade-off."""
    weights = _aged_artifact(tmp_path / "artifact", b"good" * 1000)
    assert read_manifest(tmp_path / "artifact")["mtimes_ns"]["weights.bin"] == weights.stat().st_mtime_ns
    _rewrite_keeping_size_and_mtime(weights, b"evil" * 1000)
    assert is_up_to_date(tmp_path / "artifact", "h")
    assert not is_up_to_date(tmp_path / "artifact", "h", verify=True)
    set_verify(True)
    try:
        assert not is_up_to_date(tmp_path / "artifact", "h")
    finally:
        set_verify(False)


def test_a_touched_file_is_hashed_and_accepted_when_its_content_is_the_same(tmp_path):
    weights = _aged_artifact(tmp_path / "artifact", b"good" * 1000)
    os.utime(weights)  # mtime now: hashed, same bytes
    assert is_up_to_date(tmp_path / "artifact", "h")
    weights.write_bytes(b"evil" * 1000)  # new mtime and new bytes
    assert not is_up_to_date(tmp_path / "artifact", "h")


def test_a_file_rewritten_within_the_racy_window_is_hashed(tmp_path):
    """Written just before its manifest: a same-size rewrite in the same timestamp tick would keep the
    mtime, so such files are always hashed."""
    dest = tmp_path / "artifact"
    _write_good(dest, "v1")
    _rewrite_keeping_size_and_mtime(dest / "weights.bin", b"v9")
    assert not is_up_to_date(dest, "v1")


def test_a_size_change_is_stale_without_hashing(tmp_path):
    weights = _aged_artifact(tmp_path / "artifact", b"good" * 1000)
    weights.write_bytes(b"short")
    assert not is_up_to_date(tmp_path / "artifact", "h")


def test_cli_verify_option_and_env(monkeypatch):
    from pipeline.cli import run

    assert run(["--verify", "gpus", "--json"]) == 0 and verify_enabled()
    assert run(["gpus", "--json"]) == 0 and not verify_enabled()
    monkeypatch.setenv("PIPELINE_VERIFY", "1")
    assert run(["gpus", "--json"]) == 0 and verify_enabled()
    set_verify(False)


# --- leftovers judged dead by lock files, not PIDs ----------------------------------------------------

_HOLD = """
import sys, time
from pathlib import Path
from pipeline.core.artifacts import atomic_dir
with atomic_dir(Path(sys.argv[1])) as tmp:
    (tmp / "weights.bin").write_text("partial")
    print(tmp.name, flush=True)
    time.sleep(120)
"""


def test_a_live_run_in_another_process_keeps_its_folder_and_a_dead_one_loses_it(tmp_path):
    dest = tmp_path / "artifact"
    _write_good(dest, "good")
    child = subprocess.Popen([sys.executable, "-c", _HOLD, str(dest)], stdout=subprocess.PIPE, text=True)
    try:
        name = child.stdout.readline().strip()
        assert name.startswith(".artifact.tmp-")
        _write_good(dest, "mine")  # another run beside it: must not touch the live run's folder
        assert (tmp_path / name / "weights.bin").read_text() == "partial"
        assert reusable(dest, "mine") and (tmp_path / name).is_dir()
    finally:
        child.kill()
        child.wait()
    assert is_up_to_date(dest, "mine") and (tmp_path / name).is_dir()  # a pure check deletes nothing
    assert reusable(dest, "mine")  # the lock died with the run: the stage clears its leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact"]


def test_two_runs_in_one_process_do_not_remove_each_other(tmp_path):
    """The old PID rule took this process's own PID for a dead run's: a second run (another thread)
    deleted the first one's temporary folder under it."""
    dest = tmp_path / "artifact"
    started, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with atomic_dir(dest) as tmp:
                (tmp / "weights.bin").write_text("first")
                started.set()
                release.wait(10)
                write_json_atomic(tmp / "manifest.json", build_manifest(ArtifactOrigin("t", {}, "first"), tmp, time.time()))
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    worker = threading.Thread(target=first)
    worker.start()
    assert started.wait(10)
    _write_good(dest, "second")
    release.set()
    worker.join()
    assert not errors, errors
    assert (dest / "weights.bin").read_text() == "first" and is_up_to_date(dest, "first")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact"]


def test_leftovers_without_a_lock_file_and_unheld_locks_are_removed(tmp_path):
    dest = tmp_path / "artifact"
    _write_good(dest, "good")
    (tmp_path / f".artifact.tmp-{os.getpid()}-abc123").mkdir()  # the old naming, a live PID: dead all the same
    (tmp_path / ".artifact.tmp-deadbeef0000").mkdir()
    (tmp_path / ".artifact.lock-deadbeef0000").write_text("")
    (tmp_path / ".artifact.lock-feedface0000").write_text("")  # killed before its folder was made
    (tmp_path / ".artifact.lockinit-0123456789ab").write_text("")  # killed before its lock got its name
    assert reusable(dest, "good")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact"]


def test_is_up_to_date_is_a_pure_check(tmp_path):
    """It used to delete a killed run's folders beside the artifact: a reader (jobs, evaluate's cache,
    a status check) changed the disk."""
    dest = tmp_path / "artifact"
    _write_good(dest, "good")
    (tmp_path / ".artifact.tmp-deadbeef0000").mkdir()
    (tmp_path / ".artifact.lockinit-deadbeef0001").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert is_up_to_date(dest, "good") and not is_up_to_date(dest, "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_live_runs_lockinit_file_is_kept(tmp_path):
    """An unheld .lockinit- file is a dead run's (removed); a held one belongs to a run starting now."""
    import fcntl

    dest = tmp_path / "artifact"
    _write_good(dest, "good")
    live = tmp_path / ".artifact.lockinit-0000live0000"
    fd = os.open(live, os.O_CREAT | os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        (tmp_path / ".artifact.lockinit-0000dead0000").write_text("")
        assert reusable(dest, "good")
        assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "artifact"]
    finally:
        os.close(fd)


def test_atomic_dir_syncs_the_files_and_the_folders_around_its_renames(tmp_path, monkeypatch):
    """Without fsync a power loss after the rename can leave the new name pointing at empty files."""
    import stat

    synced: list[tuple[str, str]] = []
    real = os.fsync

    def record(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        synced.append((kind, os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    dest = tmp_path / "artifact"
    with atomic_dir(dest) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "weights.bin").write_text("w")
        tmp_name = str(tmp)
    assert ("file", f"{tmp_name}/sub/weights.bin") in synced  # before the rename, under its temporary name
    assert ("dir", tmp_name) in synced and ("dir", str(tmp_path)) in synced
    synced.clear()
    write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert ("dir", str(tmp_path)) in synced

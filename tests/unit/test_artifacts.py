"""Atomic artifact folders, manifests and path safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.artifacts import atomic_dir, build_manifest, folder_hash, is_up_to_date, write_json_atomic
from pipeline.errors import InvalidInputError
from pipeline.paths import model_dir, model_slug, safe_name, stage_dir


def _write_good(dest: Path, text: str) -> None:
    with atomic_dir(dest) as tmp:
        (tmp / "weights.bin").write_text(text)
        write_json_atomic(tmp / "manifest.json", build_manifest(stage="t", inputs={"v": text}, inputs_hash=text, folder=tmp, started=time.time()))


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
        from pipeline.artifacts import atomic_dir
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

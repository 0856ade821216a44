"""The download stage through its real code paths: a local folder copied with a manifest, a re-run
that is a no-op, --force and --out, a damaged artifact made again, the disk checked first, and the
stage's progress and events going to the reporter it is given. Sources: test_download_sources.py;
hf:: test_download_hub.py; gguf: and the demo: test_download_gguf.py; checkpoint folders:
test_hf_checkpoint.py. The tiny checkpoint, the HF cache layout and the stand-in Hub live in
tests/download_fixtures.py, the shared checks in tests/download_checks.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from download_checks import assert_manifest_matches_files, json_run, mtimes, refused
from pipeline.core.artifacts import read_manifest
from pipeline.cli import run
from pipeline.download import DownloadSpec, download
from pipeline.core.reporting import RecordingReporter


def test_local_folder_copies_what_conversion_needs(tiny_ckpt: Path, build_root: Path, capsys) -> None:
    code, result, _ = json_run(["download", f"local:{tiny_ckpt}"], capsys)
    assert code == 0
    out = build_root / tiny_ckpt.name.lower() / "hf"
    assert Path(result["path"]) == out and result["kind"] == "local" and result["skipped"] is False
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not names & {"README.md", "pytorch_model.bin", "onnx"}
    manifest = assert_manifest_matches_files(out)
    assert manifest["source"] == f"local:{tiny_ckpt}" and result["files"] == len(manifest["files"])
    rewritten = {"config.json", "tokenizer_config.json"}  # made readable by transformers 4.57.1 too (hf_compat)
    for name in set(manifest["files"]) - rewritten:
        assert (out / name).read_bytes() == (tiny_ckpt / name).read_bytes()
    for name in rewritten:
        before, after = (json.loads((folder / name).read_text()) for folder in (tiny_ckpt, out))
        assert {k: v for k, v in after.items() if k in before and k != "tokenizer_class"} == {
            k: v for k, v in before.items() if k != "tokenizer_class"}
    assert json.loads((out / "config.json").read_text())["rope_theta"] == 10000.0
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert any("rope_theta" in change for change in manifest["compat_changes"])

    # A plain folder path is the same source kind; the checkpoint loads back.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert AutoTokenizer.from_pretrained(out)("w1 w2")["input_ids"] == [1, 2]


def test_rerun_is_noop_force_redoes(tiny_ckpt: Path, build_root: Path, capsys) -> None:
    assert run(["download", str(tiny_ckpt)]) == 0
    out = build_root / tiny_ckpt.name.lower() / "hf"
    before, manifest_before = mtimes(out), (out / "manifest.json").read_text()
    capsys.readouterr()

    code, result, err = json_run(["download", str(tiny_ckpt)], capsys)
    assert code == 0 and result["skipped"] is True and "up to date" in err
    assert mtimes(out) == before and (out / "manifest.json").read_text() == manifest_before

    code, result, _ = json_run(["download", str(tiny_ckpt), "--force"], capsys)
    assert code == 0 and result["skipped"] is False
    after = mtimes(out)
    assert after.keys() == before.keys() and all(after[k] > before[k] for k in before)


def test_changed_local_source_is_redone(tiny_ckpt: Path, tmp_path: Path, build_root: Path) -> None:
    import shutil

    source = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, source)
    first = download(DownloadSpec(source=str(source)))
    (source / "generation_config.json").write_text('{"max_new_tokens": 7}\n')
    second = download(DownloadSpec(source=str(source)))
    assert not first.skipped and not second.skipped
    assert json.loads((second.path / "generation_config.json").read_text()) == {"max_new_tokens": 7}


def test_out_option_writes_there(tiny_ckpt: Path, tmp_path: Path, build_root: Path) -> None:
    target = tmp_path / "elsewhere" / "hf"
    assert run(["download", str(tiny_ckpt), "--out", str(target)]) == 0
    assert (target / "model.safetensors").is_file() and (target / "manifest.json").is_file()
    assert not build_root.exists()
    (tmp_path / "precious" / "notes.txt").parent.mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("keep me")
    assert run(["download", str(tiny_ckpt), "--out", str(tmp_path / "precious")]) == 2
    assert (tmp_path / "precious" / "notes.txt").read_text() == "keep me"
    assert run(["download", str(tiny_ckpt), "--out", str(target), "--force"]) == 0


def test_corrupted_file_is_detected_and_fetched_again(hub_cache: Path, build_root: Path, capsys) -> None:
    first = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    weights = first.path / "model.safetensors"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF  # same size, different content: only the sha256 can tell
    weights.write_bytes(bytes(damaged))
    capsys.readouterr()

    heard = RecordingReporter()
    second = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"), heard)
    assert not second.skipped and second.repaired == ("model.safetensors",)
    (kind, message), *_ = heard.events
    assert kind == "warn" and "no longer match the manifest" in message and "model.safetensors" in message
    assert capsys.readouterr().err == ""  # a library call is silent unless given a reporter
    assert weights.read_bytes() == good
    assert_manifest_matches_files(second.path)
    assert download(DownloadSpec(source="hf:tiny-org/Tiny-Llama")).skipped


def test_local_copy_refused_when_the_disk_is_too_small(tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from pipeline.core import resources

    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 1 << 20)
    err = refused(["download", f"local:{tiny_ckpt}"], capsys)
    assert f"Not enough disk for the copy of local:{tiny_ckpt}" in err
    assert not build_root.exists()


@pytest.mark.slow
def test_demo_rerun_is_fast_noop(demo_hf_dir: Path, capsys) -> None:
    manifest = read_manifest(demo_hf_dir)
    before = mtimes(demo_hf_dir)
    started = time.perf_counter()
    result = download(DownloadSpec(source="demo", root=demo_hf_dir.parent.parent))
    elapsed = time.perf_counter() - started
    assert result.skipped and result.path == demo_hf_dir
    assert mtimes(demo_hf_dir) == before
    # The conversion took tens of seconds; checking hashes of ~540 MB takes about one.
    assert elapsed < max(manifest["duration_s"] / 5, 0.5), (elapsed, manifest["duration_s"])


def test_the_stage_reports_to_the_reporter_it_is_given(tiny_ckpt: Path, build_root: Path, capsys) -> None:
    """Events and progress go to the reporter (silent by default); the CLI renders them on stderr."""
    from pipeline.core.output import Output
    from pipeline.core.reporting import OutputReporter

    download(DownloadSpec(source=f"local:{tiny_ckpt}"))
    assert capsys.readouterr() == ("", "")
    out = Output()
    download(DownloadSpec(source=f"local:{tiny_ckpt}", force=True), OutputReporter(out))
    err = capsys.readouterr().err
    assert f"download: local:{tiny_ckpt} -> " in err and "copy checkpoint" in err
    assert run(["download", f"local:{tiny_ckpt}", "--force"]) == 0
    assert "copy checkpoint" in capsys.readouterr().err
    assert run(["download", f"local:{tiny_ckpt}", "--force", "--json"]) == 0
    assert "copy checkpoint" not in capsys.readouterr().err  # --json: no progress bars

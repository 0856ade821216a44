"""hf: sources (pipeline.download.hub) through the real snapshot_download: offline against a cache laid
out in tmp_path, and online against a local stand-in Hub server for the error answers; the disk
checked from the Hub's listing before anything is fetched."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from download_checks import assert_manifest_matches_files, json_run, refused, repo_files
from download_fixtures import COMMIT, COMMIT_V1, SECRET, make_hub_cache
from download_fixtures import FakeHub as _FakeHub
from pipeline.core.artifacts import read_manifest
from pipeline.cli import run
from pipeline.download import DownloadSpec, download
from pipeline.hf.folder import ALLOW_PATTERNS
from pipeline.core.reporting import RecordingReporter


def test_hub_offline_from_cache_records_commit(hub_cache: Path, build_root: Path, capsys) -> None:
    code, result, _ = json_run(["download", "hf:tiny-org/Tiny-Llama"], capsys)
    assert code == 0
    out = build_root / "tiny-llama" / "hf"
    assert result["commit"] == COMMIT and Path(result["path"]) == out
    manifest = assert_manifest_matches_files(out)
    assert manifest["commit"] == COMMIT and manifest["repo_id"] == "tiny-org/Tiny-Llama" and manifest["revision"] == "main"
    assert "huggingface_hub" in manifest["tool_versions"]
    names = {p.name for p in out.iterdir()}
    assert "model.safetensors" in names and not names & {"README.md", "pytorch_model.bin"}
    assert all(not (out / n).is_symlink() for n in names)


@pytest.mark.parametrize("argv", [["hf:tiny-org/Tiny-Llama@v1"], ["hf:tiny-org/Tiny-Llama", "--revision", "v1"]])
def test_hub_revision_tag(hub_cache: Path, build_root: Path, argv: list[str], capsys) -> None:
    code, result, _ = json_run(["download", *argv], capsys)
    assert code == 0 and result["commit"] == COMMIT_V1 and result["revision"] == "v1"
    assert read_manifest(build_root / "tiny-llama" / "hf")["commit"] == COMMIT_V1


def test_corrupt_cache_blob_offline_fails_clearly(hub_cache: Path, build_root: Path, capsys) -> None:
    repo = hub_cache / "models--tiny-org--Tiny-Llama"
    blob = (repo / "snapshots" / COMMIT / "model.safetensors").resolve()
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert run(["download", "hf:tiny-org/Tiny-Llama"]) == 1
    err = capsys.readouterr().err
    assert "corrupt" in err and "model.safetensors" in err and "HF_HUB_OFFLINE" in err
    assert not (build_root / "tiny-llama" / "hf").exists()


def test_hub_snapshot_without_weights_isrefused(tmp_path: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    only_config = tmp_path / "only-config"
    only_config.mkdir()
    (only_config / "config.json").write_bytes((tiny_ckpt / "config.json").read_bytes())
    cache = tmp_path / "cache2"
    make_hub_cache(cache, "org/NoWeights", only_config, {"main": COMMIT})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run(["download", "hf:org/NoWeights"]) == 2
    err = capsys.readouterr().err
    assert "no config.json and *.safetensors" in err and "hint:" in err


def test_refusals_offline_not_in_cache(hub_cache: Path, build_root: Path, capsys) -> None:
    err = refused(["download", "hf:other-org/Unknown"], capsys)
    assert "other-org/Unknown is not in the Hugging Face cache" in err and "HF_HUB_OFFLINE is set" in err
    err = refused(["download", "hf:tiny-org/Tiny-Llama@no-such-branch"], capsys)
    assert "revision 'no-such-branch' of tiny-org/Tiny-Llama is not in the Hugging Face cache" in err


def test_hub_online_fetches_only_what_conversion_needs(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    with _FakeHub("tiny-org/Tiny-Llama", repo_files(tiny_ckpt)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, result, _ = json_run(["download", "hf:tiny-org/Tiny-Llama"], capsys)
    assert code == 0 and result["commit"] == COMMIT and result["skipped"] is False
    assert "model.safetensors" in hub.fetched() and not hub.fetched() & {"README.md", "pytorch_model.bin"}
    manifest = assert_manifest_matches_files(build_root / "tiny-llama" / "hf")
    assert manifest["commit"] == COMMIT and set(manifest["files"]) == hub.fetched()
    assert (online / "models--tiny-org--Tiny-Llama" / "refs" / "main").read_text() == COMMIT


def test_interrupted_hub_download_fetches_only_what_is_missing(
    online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch
) -> None:
    """An interrupted run leaves finished files in the HF cache; the next run downloads only the rest.
    (huggingface_hub 2.x restarts a half-written file from zero in a new process: it writes to
    process-unique temporary files; within one process it resumes a dropped connection by Range.)"""
    files = repo_files(tiny_ckpt)
    partial = tiny_ckpt.parent / "partial-copy"
    partial.mkdir(exist_ok=True)
    for name in ("config.json", "tokenizer.json"):
        (partial / name).write_bytes(files[name])
    make_hub_cache(online, "tiny-org/Tiny-Llama", partial, {"main": COMMIT})
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    assert "model.safetensors" in hub.fetched() and not hub.fetched() & {"config.json", "tokenizer.json"}
    assert (result.path / "model.safetensors").read_bytes() == files["model.safetensors"]
    assert (result.path / "tokenizer.json").read_bytes() == files["tokenizer.json"]  # config.json gains 4.x keys


def test_incomplete_cached_snapshot_offline_isrefused(
    online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys
) -> None:
    with _FakeHub("tiny-org/Tiny-Llama", repo_files(tiny_ckpt)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))  # also caches the tree listing
    (online / "models--tiny-org--Tiny-Llama" / "snapshots" / COMMIT / "model.safetensors").unlink()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = refused(["download", "hf:tiny-org/Tiny-Llama", "--force"], capsys)
    assert "is incomplete" in err and "model.safetensors" in err and "Unset HF_HUB_OFFLINE" in err
    assert (build_root / "tiny-llama" / "hf" / "model.safetensors").is_file()  # the good artifact stays


def test_corrupt_cache_blob_is_downloaded_again_online(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    files = repo_files(tiny_ckpt)
    make_hub_cache(online, "tiny-org/Tiny-Llama", tiny_ckpt, {"main": COMMIT})
    blob = (online / "models--tiny-org--Tiny-Llama" / "snapshots" / COMMIT / "model.safetensors").resolve()
    blob.write_bytes(b"\0" * blob.stat().st_size)
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        heard = RecordingReporter()
        result = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"), heard)
    assert ("warn", "cached file(s) corrupt (model.safetensors); downloading them again") in heard.events
    assert hub.fetched() == {"model.safetensors"}
    assert (result.path / "model.safetensors").read_bytes() == files["model.safetensors"]


@pytest.mark.parametrize(
    ("status", "error_code", "expected"),
    [
        (401, "GatedRepo", "is gated"),
        (401, "RepoNotFound", "repository not found"),
        (404, "RevisionNotFound", "Revision 'v9' not found"),
    ],
)
def test_hub_errors_are_mapped(
    status: int, error_code: str, expected: str, online: Path, build_root: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    with _FakeHub(error=(status, error_code)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = refused(["download", "hf:gated-org/Gated-Model@v9"], capsys)
    assert expected in err
    assert f"Bearer {SECRET}" in {auth for *_, auth in hub.seen}  # HF_TOKEN was honoured ...
    assert SECRET not in err  # ... and never printed
    assert not build_root.exists()


def test_gated_repo_without_token(online: Path, build_root: Path, monkeypatch, capsys) -> None:
    with _FakeHub(error=(401, "GatedRepo")) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = refused(["download", "hf:gated-org/Gated-Model"], capsys)
    assert "hf:gated-org/Gated-Model is gated" in err and "set HF_TOKEN" in err
    assert f"Bearer {SECRET}" not in {auth for *_, auth in hub.seen}


def test_hub_download_refused_when_the_disk_is_too_small(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from pipeline.core import resources

    files = repo_files(tiny_ckpt)
    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 1 << 20)
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = refused(["download", "hf:tiny-org/Tiny-Llama"], capsys)
    assert "Not enough disk for hf:tiny-org/Tiny-Llama" in err and "to fetch into the HF cache" in err
    assert "0.00 GiB is free" in err and "PIPELINE_BUILD_DIR" in err
    assert hub.fetched() == set()  # the Hub's listing was read, no file was fetched
    assert not build_root.exists() and not list(online.rglob("blobs/*"))


def test_hub_disk_check_counts_what_the_cache_lacks_and_the_copy(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch) -> None:
    import pipeline.core.resources

    files = repo_files(tiny_ckpt)
    partial = tiny_ckpt.parent / "partial-for-disk"
    partial.mkdir(exist_ok=True)
    (partial / "model.safetensors").write_bytes(files["model.safetensors"])
    make_hub_cache(online, "tiny-org/Tiny-Llama", partial, {"main": COMMIT})
    checked: list[tuple[int, str]] = []
    monkeypatch.setattr(pipeline.core.resources, "check_disk", lambda target, needed, *, what, free: checked.append((needed, what)))
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    wanted = {name: len(data) for name, data in files.items() if any(fnmatch.fnmatch(name, p) for p in ALLOW_PATTERNS)}
    fetch = sum(size for name, size in wanted.items() if name != "model.safetensors")  # the weights were cached
    assert checked[0][0] == fetch + sum(wanted.values()) and "to fetch into the HF cache" in checked[0][1]
    assert checked[1] == (sum(wanted.values()), "the copy of hf:tiny-org/Tiny-Llama")  # the cached snapshot, before copying

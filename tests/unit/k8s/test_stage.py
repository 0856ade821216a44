"""pipeline.k8s.stage and `pipeline k8s render`: same inputs are a no-op, --engine and --out, bad inputs
exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import run

from k8s_cases import CASES, make_engine


def test_same_inputs_is_a_noop_and_engine_option(build_root: Path, capsys: pytest.CaptureFixture) -> None:
    profile, engine = make_engine(build_root, **CASES["h100-tp2"])
    assert run(["k8s", "render", "--engine", str(engine), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["skipped"] is False and first["kind"] == "Deployment" and first["gpus_per_pod"] == 2
    out = Path(first["out_dir"])
    assert out == build_root / "demo" / "k8s" / profile.id
    stamp = (out / "deployment.yaml").stat().st_mtime_ns
    assert run(["k8s", "render", "--profile", profile.name, "--json"]) == 0  # readable name works too
    second = json.loads(capsys.readouterr().out)
    assert second["skipped"] is True and (out / "deployment.yaml").stat().st_mtime_ns == stamp
    assert run(["k8s", "render", "--profile", profile.id, "--replicas", "2", "--max-replicas", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] is False
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_out_option(build_root: Path, tmp_path: Path) -> None:
    profile, _ = make_engine(build_root, **CASES["h100-tp1"])
    assert run(["k8s", "render", "--profile", profile.id, "--out", str(tmp_path / "k8s-out")]) == 0
    assert (tmp_path / "k8s-out" / "kustomization.yaml").is_file()


@pytest.mark.parametrize("args", [
    [],
    ["--profile", "abc", "--engine", "."],
    ["--profile", "doesnotexist"],
    ["--profile", "../etc"],
    ["--engine", "/nonexistent/engine"],
    ["--model-store", "nfs"],
    ["--model-store", "s3"],
    ["--model-store", "s3", "--s3-uri", "https://bucket/x"],
    ["--model-store", "image"],
    ["--min-replicas", "5", "--max-replicas", "2"],
    ["--namespace", "Bad_NS"],
    ["--queue-ratio-target", "0"],
])
def test_bad_inputs_exit_2(build_root: Path, args: list[str]) -> None:
    profile, _ = make_engine(build_root, **CASES["h100-tp1"])
    needs_profile = not any(a in args for a in ("--profile", "--engine")) and args
    assert run(["k8s", "render", *(["--profile", profile.id] if needs_profile else []), *args]) == 2


def test_engine_folder_without_profile(build_root: Path, tmp_path: Path) -> None:
    folder = tmp_path / "engine"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"stage": "build"}))
    assert run(["k8s", "render", "--engine", str(folder)]) == 2


@pytest.mark.parametrize("case", ["h100-tp1", "cpu-reference"])
def test_the_draft_model_is_counted_in_the_pod_memory(build_root: Path, case: str) -> None:
    """A draft-target build holds the draft's own build folder at <build>/draft (pipeline/build/speculative.py): the
    server loads it beside the target, so its bytes size the pod's memory and model volume as the target's do."""
    import os

    from pipeline.k8s import K8sSpec, render_k8s
    from k8s_cases import load

    def memory(result) -> int:
        docs = load(result.out_dir)
        workload = next(d for ds in docs.values() for d in ds if d["kind"] in ("Deployment", "LeaderWorkerSet"))
        return int(workload["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"].removesuffix("Gi"))

    profile, engine = make_engine(build_root, **CASES[case])
    before = memory(render_k8s(K8sSpec(profile_id=profile.id, force=True)))
    draft = engine / "draft"
    draft.mkdir()
    with open(draft / ("rank0.engine" if case != "cpu-reference" else "model.safetensors"), "wb") as f:
        f.truncate(2 << 30)  # a 2 GiB draft (sparse: no disk used)
    after_result = render_k8s(K8sSpec(profile_id=profile.id, force=True))
    after = memory(after_result)
    factor = 2.5 if case == "cpu-reference" else 1.25  # the reference runtime keeps fp32 copies; an engine is read once
    assert after - before >= int(2 * factor)
    inputs = json.loads((after_result.out_dir / "manifest.json").read_text())["inputs"]
    assert inputs["draft_bytes"] == os.stat(draft / os.listdir(draft)[0]).st_size

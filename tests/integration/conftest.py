"""The demo deployment, once per session: demo HF checkpoint -> reference engine folder -> rendered
repository -> a real tritonserver (through pipeline.serve). Tests using `demo_server` are marked
`triton`; start-up takes about a minute on 2 cores."""

from __future__ import annotations

from pathlib import Path

import pytest

DEMO_BUILD_CONFIG = {"max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512, "max_num_tokens": 2048}


@pytest.fixture(scope="session")
def demo_engine(demo_hf_dir: Path, session_build_root: Path) -> Path:
    """A reference-runtime engine folder for the demo model (small limits keep the KV cache small)."""
    from pipeline.reference_engine import write_reference_engine_dir

    engine = session_build_root / "smollm2-demo" / "engines" / "ref-test"
    return write_reference_engine_dir(demo_hf_dir, engine, DEMO_BUILD_CONFIG)


@pytest.fixture(scope="session")
def demo_repo(demo_engine: Path) -> Path:
    from pipeline.render import RenderSpec, render

    return render(RenderSpec(engine=demo_engine, runtime="reference")).repo


@pytest.fixture(scope="session")
def demo_server(demo_repo: Path, session_build_root: Path):
    """tritonserver serving the demo repository; yields the TritonServer (grpc_url, log_file, ...)."""
    from pipeline.serve import ServerSpec, start_server

    spec = ServerSpec(repo=demo_repo, log_file=session_build_root / "logs" / "demo-tritonserver.log",
                      ready_timeout_s=600, warmup=True)
    with start_server(spec) as server:
        yield server


"""Fixtures of the reliability suite, reused rather than copied:

- the tiny Llama checkpoint, the per-test build root and the Hugging Face cache/hub stand-ins of
  tests/unit/test_download.py (imported from that module);
- the demo deployment of tests/integration/conftest.py (`demo_engine`, `demo_repo`, `demo_server`),
  loaded from that file so the server is started by exactly the same code;
- a second, queue-limited server (`queue_server`) rendered from the same demo engine with a small
  `max_queue_size` and a short queue timeout.

Several of these start a real tritonserver; the tests that use them are marked `triton`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO_ROOT = TESTS.parent

# tests/unit is what pytest itself puts on sys.path for test_download.py (rootdir import mode
# "prepend", no __init__.py): importing it here yields that same module, not a copy.
if str(TESTS / "unit") not in sys.path:
    sys.path.insert(0, str(TESTS / "unit"))

from test_download import (  # noqa: E402  (fixtures are re-exported on purpose)
    COMMIT,
    SECRET,
    _FakeHub,
    build_root,
    hub_cache,
    make_hub_cache,
    online,
    tiny_ckpt,
)


def _load_integration_conftest():
    path = TESTS / "integration" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_reliability_integration_conftest", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


_INTEGRATION = _load_integration_conftest()
demo_engine = _INTEGRATION.demo_engine
demo_repo = _INTEGRATION.demo_repo
demo_server = _INTEGRATION.demo_server
DEMO_BUILD_CONFIG = _INTEGRATION.DEMO_BUILD_CONFIG

QUEUE_SIZE = 2
QUEUE_TIMEOUT_US = 300_000

__all__ = [
    "COMMIT", "SECRET", "_FakeHub", "build_root", "hub_cache", "make_hub_cache", "online", "tiny_ckpt",
    "demo_engine", "demo_repo", "demo_server", "DEMO_BUILD_CONFIG", "queue_server", "QUEUE_SIZE",
]


@pytest.fixture(scope="session")
def queue_server(demo_engine: Path, session_build_root: Path):
    """The demo engine rendered with max_queue_size=QUEUE_SIZE and a 0.3 s queue timeout, served."""
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    _INTEGRATION._python_backend_libpython()
    repo = render(RenderSpec(engine=demo_engine, runtime="reference", out=session_build_root / "reliability" / "queue-repo",
                             max_queue_size=QUEUE_SIZE, queue_timeout_us=QUEUE_TIMEOUT_US, bls_instances=1)).repo
    spec = ServerSpec(repo=repo, log_file=session_build_root / "logs" / "queue-tritonserver.log", ready_timeout_s=600,
                      warmup=True)
    with start_server(spec) as server:
        yield server

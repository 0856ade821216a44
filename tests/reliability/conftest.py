"""Fixtures of the reliability suite, reused rather than copied:

- the tiny Llama checkpoint, the per-test build root and the Hugging Face cache/hub stand-ins of
  tests/unit/test_download.py (imported from that module);
- the demo deployment (`demo_engine`, `demo_repo`, `demo_server`) comes from tests/conftest.py: the
  same session server as tests/integration.

Tests that need a server with other settings (test_server_load.py's queue-limited one) start it
themselves, for that test only.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

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

__all__ = ["COMMIT", "SECRET", "_FakeHub", "build_root", "hub_cache", "make_hub_cache", "online", "tiny_ckpt"]

"""A bundle moved to its model root, with the build/ it came from deleted, serves and passes smoke.

The session's demo server (tests/conftest.py) serves exactly such a bundle: `relocated_bundle` renders
it in a private build/ for a root elsewhere, moves it there and deletes that build/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.render.model_repo import parse_model_config
from pipeline.render import MODELS
from pipeline.smoke import SmokeSpec, run_smoke

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def test_relocated_bundle_serves_and_passes_smoke(relocated_bundle, demo_server, session_build_root: Path) -> None:
    root = relocated_bundle["root"]
    assert not relocated_bundle["build"].exists() and not relocated_bundle["rendered_at"].exists()
    assert Path(demo_server.spec.repo) == root.resolve()
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["bundle"]["model_root"] == str(root)
    # every path the models read is under the root; nothing names the build folders it was made from
    for model in MODELS:
        config = parse_model_config(root / model / "config.pbtxt")
        for key, value in config.parameters.items():
            text = value.string_value
            if text.startswith("/") and key != "executor_worker_path":
                assert text.startswith(str(root) + "/") and Path(text).exists(), (model, key, text)
        raw = (root / model / "config.pbtxt").read_text()
        assert str(session_build_root) not in raw and str(relocated_bundle["build"]) not in raw
    report = run_smoke(SmokeSpec(url=demo_server.grpc_url, model="ensemble"))
    assert report.passed, {c.name: c.detail for c in report.checks if not c.passed}

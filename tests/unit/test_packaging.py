"""What the wheel carries: every package, the templates (as pipeline.model_repo_templates) and the contract
tables render checks against, found through importlib.resources. tests/integration/test_install.py
builds and installs the wheel itself."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest

from pipeline.render.model_repo import templates_dir
from pipeline.render.checks import REFERENCE_TABLES, reference_tables_dir

ROOT = Path(__file__).resolve().parents[2]
if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which the README supports: the same parser, from the test extra
    import tomli as tomllib


@pytest.fixture(scope="module")
def setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_is_listed(setuptools_config: dict) -> None:
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pipeline").rglob("__init__.py")}
    listed = set(setuptools_config["packages"])
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert setuptools_config["package-dir"] == {"pipeline.model_repo_templates": "model_repo_templates"}
    assert listed - found == {"pipeline.model_repo_templates"}


def test_package_data_covers_every_template_file(setuptools_config: dict) -> None:
    patterns = setuptools_config["package-data"]["pipeline.model_repo_templates"]
    folder = ROOT / "model_repo_templates"
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.name != "__init__.py"]
    assert files
    missed = [f for f in files if not any(fnmatch.fnmatch(f, pattern) and f.count("/") == pattern.count("/") for pattern in patterns)]
    assert missed == [], "add a package-data pattern for these template files"


def test_packaged_tables_are_the_shared_ones(reference_dir: Path) -> None:
    packaged = ROOT / "pipeline" / "data" / "reference"
    for name in REFERENCE_TABLES:
        assert (packaged / name).read_bytes() == (reference_dir / name).read_bytes(), f"{name} drifted from shared/reference/"
    readme = (packaged / "README.md").read_text()
    assert all(name in readme for name in REFERENCE_TABLES) and "c2e65b88d852" in readme


def test_resources_come_from_the_installed_package(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PIPELINE_TEMPLATES_DIR", raising=False)
    monkeypatch.delenv("PIPELINE_REFERENCE_DIR", raising=False)
    # the editable install maps pipeline.model_repo_templates to the checkout's model_repo_templates/
    assert templates_dir().resolve() == (ROOT / "model_repo_templates").resolve()
    assert reference_tables_dir().resolve() == (ROOT / "pipeline" / "data" / "reference").resolve()
    monkeypatch.setenv("PIPELINE_TEMPLATES_DIR", str(tmp_path))  # the override still wins, and is checked
    from pipeline.core.errors import StageFailedError

    with pytest.raises(StageFailedError, match="templates not found"):
        templates_dir()


def test_missing_contract_tables_are_an_error(monkeypatch, tmp_path: Path) -> None:
    from pipeline.core.errors import StageFailedError

    (tmp_path / REFERENCE_TABLES[0]).write_text("model\tdirection\n")  # one table of three
    monkeypatch.setenv("PIPELINE_REFERENCE_DIR", str(tmp_path))
    with pytest.raises(StageFailedError, match=REFERENCE_TABLES[1]):
        reference_tables_dir()

"""The shape #15 gave the code, kept: no module of pipeline/ over MAX_MODULE_LINES lines, and no function
outside the CLI with more than MAX_PARAMETERS parameters (self and cls not counted; the CLI's Typer
commands take one parameter per option, so they are exempt).

A module that grows past the limit holds more than one concern: split it along them (see
ARCHITECTURE.md). A function that needs more values takes the frozen value they travel in together.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"
CLI = PACKAGE / "cli"

MAX_MODULE_LINES = 400
MAX_PARAMETERS = 6


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs) + bool(args.vararg) + bool(args.kwarg)
    positional = [*args.posonlyargs, *args.args]
    if positional and positional[0].arg in ("self", "cls"):
        count -= 1
    return count


def long_parameter_lists() -> list[tuple[int, str]]:
    found = []
    for path in _sources():
        if CLI in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > MAX_PARAMETERS:
                found.append((parameter_count(node), f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def long_modules() -> list[tuple[int, str]]:
    sizes = ((len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(ROOT))) for p in _sources())
    return sorted(((lines, name) for lines, name in sizes if lines > MAX_MODULE_LINES), reverse=True)


def test_the_counts_see_what_they_count():
    tree = ast.parse("class A:\n    def f(self, a, b=1, *c, d, **e): ...\n\ndef g(x, /, y): ...\n")
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert parameter_count(functions["f"]) == 5 and parameter_count(functions["g"]) == 2
    assert len(_sources()) > 100 and any(p.parent == CLI for p in _sources())


def test_the_architecture_map_names_every_module_and_only_real_paths():
    """ARCHITECTURE.md is where a newcomer starts: every module outside the CLI is named in it, and every
    path it quotes exists."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    unnamed = []
    for path in _sources():
        if CLI in path.parents or path.parent == PACKAGE / "data":
            continue
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        if not re.search(rf"(?<![A-Za-z_]){re.escape(stem)}(?![A-Za-z_])", text):
            unnamed.append(str(path.relative_to(ROOT)))
    assert not unnamed, f"modules ARCHITECTURE.md does not name: {unnamed}"
    quoted = re.findall(r"`((?:pipeline|model_repo_templates|tests|scripts)/[^`\s]+)`", text)
    assert quoted and not [q for q in quoted if not (ROOT / q).exists()]


def test_no_module_is_over_the_line_limit():
    assert not long_modules(), f"modules over {MAX_MODULE_LINES} lines (lines, module): {long_modules()}"


def test_no_function_outside_the_cli_has_a_long_parameter_list():
    assert not long_parameter_lists(), (f"functions with more than {MAX_PARAMETERS} parameters: "
                                        f"{long_parameter_lists()}")

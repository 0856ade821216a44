"""The import graph of pipeline/, read from the source with ast (module-level, function-local and
TYPE_CHECKING imports alike): no import cycles, and the stages in order, cli -> jobs -> ... -> core.

A package's __init__ importing its own submodules is not counted (that is how a package exposes them).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"

# The stages in order, lowest first: a module may import from its own stage and from the tiers below, never from
# a stage beside it in its own tier or above it. A stage is pipeline/<name>/ (or the module pipeline/<name>.py).
TIERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # facts and plumbing every stage shares (and pipeline/__init__, pipeline/data's table readers)
    ("planner", "hf"),  # the model x GPU arithmetic (shapes from config.json); what an HF folder and a SOURCE are
    ("placement",),  # where a model loads (asks the planner for the footprint)
    ("quantization",),  # ModelOpt, calibration, simulated numerics (ModelOpt's calibration asks placement)
    ("download", "reference_runtime"),  # the first step; the CPU runtime rendered repositories import (simulated numerics)
    ("convert",),
    ("evaluate",),
    ("build",),
    ("render",),
    ("clients",),  # a running server's contract and its clients
    ("serve",),  # starts servers and waits for them with the clients
    ("smoke", "bench", "doctor"),  # over a running server (doctor: the host, for every stage, serve's binary too)
    ("k8s",),  # manifests from a rendered repository and serve's command lines
    ("jobs",),  # stages chained: the demo and engine jobs, evaluate-and-record
    ("cli",),  # Typer commands over jobs and stages
)
BASE = {"pipeline": "core", "pipeline.data": "core"}  # the package root (its version) and the data package

# Known cycles; each entry is the set of modules a cycle may run through. Remove an entry when its cycle is gone.
ALLOWED_CYCLES: list[tuple[frozenset[str], str]] = []
# Known imports against the order, with the same rule: remove them as they go.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(*, own_submodules: bool = False) -> dict[str, set[str]]:
    """importer -> the pipeline modules it imports anywhere in its source (a package's imports of its own
    submodules only with own_submodules)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node, name, is_package)
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.add(sub if sub in mods else module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    found = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in mods), None)
                    if found:
                        targets.add(found)
        own = (lambda t: t.startswith(name + ".")) if is_package and not own_submodules else (lambda t: False)
        graph[name] = {t for t in targets if t in mods and t != name and not own(t)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return groups


def stage(module: str) -> str:
    if module in BASE:
        return BASE[module]
    return module.split(".")[1]


def tier(module: str) -> int:
    name = stage(module)
    return next(i for i, stages in enumerate(TIERS) if name in stages)


def test_the_graph_is_read():
    graph = import_graph()
    assert "pipeline.core.resources" in graph["pipeline.convert.resources"]
    assert "pipeline.core.host" in graph["pipeline.serve"]  # a module-level import
    assert "pipeline.build.profiles" in graph["pipeline.serve"]  # a function-local one
    assert all(not t.startswith("pipeline.cli.") for t in graph["pipeline.cli"])  # the package's own submodules


def test_every_module_is_in_a_stage_of_the_order():
    """Each module of pipeline/ is in a stage the order names, and each stage it names exists."""
    mods = modules()
    named = {name for stages in TIERS for name in stages}
    assert not sorted(m for m in mods if stage(m) not in named), "modules in no stage of TIERS"
    assert named <= {stage(m) for m in mods}, "stages of TIERS with no module"
    assert len(named) == sum(len(stages) for stages in TIERS), "a stage named twice"


def test_no_import_cycles():
    unexplained = [sorted(group) for group in cycles(import_graph())
                   if not any(group <= allowed for allowed, _ in ALLOWED_CYCLES)]
    assert not unexplained, f"import cycles: {unexplained}"


def test_no_submodule_imports_a_package_that_imports_it():
    """A package's __init__ may import its submodules, but then none of them may import the package back (the
    cycle a function-local import would hide, e.g. pipeline.build handing work to pipeline.build.pytorch)."""
    assert not cycles(import_graph(own_submodules=True)), cycles(import_graph(own_submodules=True))


def test_imports_go_down_the_stages():
    """A module imports its own stage or a stage of a lower tier, never one beside it or above it."""
    against = sorted((importer, target, stage(importer), stage(target))
                     for importer, targets in import_graph().items() for target in targets
                     if stage(target) != stage(importer) and tier(target) >= tier(importer)
                     and (importer, target) not in ALLOWED_UPWARD)
    assert not against, "imports against the stage order (importer, imported, their stages): " + repr(against)


def test_the_order_is_the_one_a_spec_travels():
    """The steps of `pipeline engine` come in the order the job runs them, each in a tier of its own."""
    steps = ["download", "convert", "evaluate", "build", "render", "serve", "jobs", "cli"]
    ranks = [tier(f"pipeline.{name}") for name in steps]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks), ranks

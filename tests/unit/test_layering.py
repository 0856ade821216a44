"""The import graph of pipeline/, read from the source with ast (module-level, function-local and
TYPE_CHECKING imports alike): no import cycles, and the layering cli -> jobs -> stages -> core.

A package's __init__ importing its own submodules is not counted (that is how a package exposes them).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"

# The layers, lowest first. A module may import from its own layer and the layers below it.
CORE = {  # facts and plumbing every stage shares; they import nothing but each other
    "pipeline.core.errors": "the exception types the CLI maps to exit codes",
    "pipeline.core.output": "the one output sink the CLI renders to",
    "pipeline.core.reporting": "the Reporter stages report progress and events to",
    "pipeline.core.paths": "where build/ artifacts live",
    "pipeline.core.artifacts": "manifests, hashes, atomic folders",
    "pipeline.core.versions": "the pinned upstream versions",
    "pipeline.core.resources": "free memory, disk and the disk check, measured now",
    "pipeline.core.cpus": "the CPUs this process may use",
    "pipeline.core.host": "this host's GPUs matched to the GPU table (--gpu auto)",
    "pipeline.core.quant": "what each --quant / --kv-cache name means",
    "pipeline.core.gpus": "the GPU table",
    "pipeline.core.deployable": "names shared by the stages that write and read PyTorch-backend deployables",
    "pipeline.core.processes": "child processes tied to their parent (servers)",
    "pipeline.core.tool_env": "the environment NVIDIA's tools and servers get (the image's Python, not the pipeline's venv)",
    "pipeline.core.reaper": "cleans up after a server whose owner died (a process of its own; standard library only)",
    "pipeline.hf.compat": "HF config/tokenizer compatibility across transformers versions",
}
JOBS = {"pipeline.jobs": "runs stages in sequence (the demo and engine jobs, evaluate-and-record)"}
CLI = "pipeline.cli"  # the package and everything under it: Typer commands over jobs and stages
# Everything else under pipeline/ is a stage (download, convert, build, render, serve, smoke, bench, ...).

LAYERS = ("core", "stage", "jobs", "cli")

# Known cycles other #15 work removes; each entry is the set of modules a cycle may run through.
# Remove an entry when its cycle is gone (an entry no cycle uses any more is harmless but stale).
ALLOWED_CYCLES: list[tuple[frozenset[str], str]] = []
# Known imports against the layering, with the same rule: remove them as they go.
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


def layer(module: str) -> str:
    if module == CLI or module.startswith(CLI + "."):
        return "cli"
    if module in JOBS:
        return "jobs"
    if module in CORE:
        return "core"
    return "stage"


def test_the_graph_is_read():
    graph = import_graph()
    assert "pipeline.core.resources" in graph["pipeline.convert.resources"]
    assert "pipeline.core.host" in graph["pipeline.serve"]  # a module-level import
    assert "pipeline.build.profiles" in graph["pipeline.serve"]  # a function-local one
    assert all(not t.startswith("pipeline.cli.") for t in graph["pipeline.cli"])  # the package's own submodules


def test_the_layer_sets_name_real_modules():
    mods = modules()
    assert set(CORE) <= set(mods) and set(JOBS) <= set(mods) and CLI in mods


def test_no_import_cycles():
    unexplained = [sorted(group) for group in cycles(import_graph())
                   if not any(group <= allowed for allowed, _ in ALLOWED_CYCLES)]
    assert not unexplained, f"import cycles: {unexplained}"


def test_no_submodule_imports_a_package_that_imports_it():
    """A package's __init__ may import its submodules, but then none of them may import the package back (the
    cycle a function-local import would hide, e.g. pipeline.build handing work to pipeline.build.pytorch)."""
    assert not cycles(import_graph(own_submodules=True)), cycles(import_graph(own_submodules=True))


def test_imports_go_down_the_layers():
    """cli -> jobs -> stages -> core: a module imports its own layer or the ones below, never above."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted((importer, target, layer(importer), layer(target))
                    for importer, targets in import_graph().items() for target in targets
                    if rank[layer(target)] > rank[layer(importer)] and (importer, target) not in ALLOWED_UPWARD)
    assert not upward, "imports against the layering (importer, imported, their layers): " + repr(upward)

"""`pipeline --help` imports no stage: the root group lists COMMANDS without importing their modules, and
COMMANDS says exactly what the modules register."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import typer

import pipeline.cli as cli

HEAVY = ("torch", "transformers", "numpy", "tritonclient")

_PROBE = """
import contextlib, io, json, sys
from pipeline.cli import run
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = run(["--help"])
print(json.dumps({"code": code, "modules": sorted(sys.modules), "help": out.getvalue()}))
"""


def test_root_help_imports_no_stage_and_no_heavy_library() -> None:
    """It used to import every command's module and their stages (numpy through the planner, pydantic
    models of every spec): 0.53 s of a quiet machine, 40 times `python -c pass`."""
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(probe.stdout)
    assert seen["code"] == 0 and all(name in seen["help"] for name in cli.COMMANDS)
    loaded = set(seen["modules"])
    assert not [name for name in HEAVY if name in loaded or any(m.startswith(name + ".") for m in loaded)]
    commands = sorted(m for m in loaded if m.startswith("pipeline.cli.") and not m.startswith("pipeline.cli._"))
    assert not commands, f"command modules imported for the root --help: {commands}"


def test_commands_are_what_the_modules_register_with_their_help() -> None:
    registered: dict[str, str] = {}
    for module_info in pkgutil.iter_modules(cli.__path__):
        if module_info.name.startswith("_"):
            continue
        holder = typer.Typer()
        __import__(f"pipeline.cli.{module_info.name}", fromlist=["register"]).register(holder)
        group = typer.main.get_group(holder)
        registered.update({name: module_info.name for name in group.list_commands(None)})  # type: ignore[arg-type]
    assert registered == {name: module for name, (module, _) in cli.COMMANDS.items()}
    for name, (_, listed) in cli.COMMANDS.items():
        command = cli.load_command(name)
        assert (command.help or "").split("\n\n")[0].strip() == listed, name


def test_a_command_still_runs_and_an_unknown_one_is_a_usage_error() -> None:
    assert cli.run(["gpus", "--json"]) == 0
    assert cli.run(["no-such-command"]) == 2

"""The `pipeline` command: a thin layer that parses options, calls a stage, prints the result.

Each stage's commands live in a module of this package exposing `register(app)`; they are picked up
here. Errors of the project's own types become one message and an exit code in exactly one place
(`run`); anything else is a bug and shows its traceback under --debug.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from typing import Sequence

import typer

from pipeline.core.artifacts import set_verify
from pipeline.core.errors import PipelineError
from pipeline.core.output import OUT
from pipeline.core.processes import Terminated, terminate_as_interrupt

app = typer.Typer(
    name="pipeline",
    help="Hugging Face checkpoint -> TensorRT-LLM checkpoint -> engine -> Triton repository -> smoke and latency gates.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_DEBUG = {"on": False}


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.", envvar="PIPELINE_DEBUG"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only print results and errors."),
    verify: bool = typer.Option(False, "--verify", envvar="PIPELINE_VERIFY", help=(
        "Hash every file of an existing artifact before reusing it (default: size and mtime).")),
) -> None:
    _DEBUG["on"] = debug
    OUT.quiet = quiet
    set_verify(verify)


def _register_commands() -> None:
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_commands()


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI in-process and return its exit code (tests call this)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _DEBUG["on"] = "--debug" in args or os.environ.get("PIPELINE_DEBUG", "") not in ("", "0", "false")
    OUT.json_mode = False
    try:
        with terminate_as_interrupt():  # SIGTERM unwinds like Ctrl-C: servers stop, temporaries go
            result = app(args=args, prog_name="pipeline", standalone_mode=False)
    except PipelineError as error:
        if _DEBUG["on"]:
            import traceback

            traceback.print_exc()
        OUT.error(error.message, error.hint)
        return error.exit_code
    except typer.Exit as stop:
        return stop.exit_code
    except Terminated as stop:
        OUT.error("Terminated.")
        return stop.exit_code
    except (typer.Abort, KeyboardInterrupt):
        OUT.error("Interrupted.")
        return 130
    except Exception as error:
        if _is_usage_error(error):  # unknown option, bad value, missing argument: Click's message, exit 2
            error.show()  # type: ignore[attr-defined]
            return int(error.exit_code)  # type: ignore[attr-defined]
        if _DEBUG["on"]:  # a bug: say so plainly, traceback on --debug
            raise
        OUT.error(f"Internal error ({type(error).__name__}): {error}", "Re-run with --debug for the traceback and report it.")
        return 70
    return result if isinstance(result, int) else 0


def _is_usage_error(error: Exception) -> bool:
    """A command-line usage error: Click's ClickException interface (show() and an int exit_code), which
    Typer's usage errors have whether Typer uses click itself or its private copy of it (0.26 on), so no
    name outside Typer's public API is needed to recognise them."""
    return callable(getattr(error, "show", None)) and isinstance(getattr(error, "exit_code", None), int)


def main() -> None:
    sys.exit(run())

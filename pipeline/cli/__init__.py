"""The `pipeline` command: a thin layer that parses options, calls a stage, prints the result.

Each stage's commands live in a module of this package exposing `register(app)`. COMMANDS names them;
a command's module (and the stages it imports: torch, transformers, tritonclient ...) is imported only
when that command runs or shows its own help, so `pipeline --help` loads none of them (tests/unit/
test_cli_imports.py holds COMMANDS to what the modules register, and the listing to their docstrings). Errors of the project's own types become one message and an exit code in exactly one place
(`run`); anything else is a bug and shows its traceback under --debug.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Sequence

import typer
from typer.core import TyperCommand, TyperGroup

from pipeline.core.errors import PipelineError
from pipeline.core.output import OUT

# command -> (its module in this package, the first paragraph of its help: what `pipeline --help` lists)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("bench", "Measure TTFT, TPOT, latency and throughput of a served model; gate on SLOs (exit 4 when one fails)."),
    "build": ("build", "Build the engine (or, with --backend pytorch, the LLM-API deployable) for a GPU and goal into\n"
                       "build/<model>/engines/<profile-id>/ (a no-op when it exists)."),
    "convert": ("convert", "Quantize with NVIDIA ModelOpt and export a TensorRT-LLM checkpoint (or, with --format hf, a "
                           "ModelOpt\nunified HF checkpoint) to build/<model>/checkpoints/<id>/."),
    "doctor": ("doctor", "GPUs, driver/CUDA, TensorRT-LLM and Triton presence, free disk, and which runtimes can run here."),
    "download": ("download", "Fetch or convert a model into build/<model>/hf/ (safetensors + tokenizer + manifest)."),
    "evaluate": ("evaluate", "Measure perplexity and top-1 agreement of each --quant format against the unquantized model\n"
                             "(ModelOpt simulated quantization on the CPU) and fail (exit 4) when perplexity rises more "
                             "than --max-delta."),
    "gpus": ("gpus", "List the GPUs the pipeline knows: datasheet figures and the precisions each can run."),
    "demo": ("jobs", "download -> convert -> build (cpu) -> render -> serve -> smoke -> stop, with one summary table."),
    "engine": ("jobs", "download -> convert -> (evaluate) -> build -> render for one GPU: what `make engine` runs. With\n"
                       "--backend pytorch: convert --format hf, then the LLM-API deployable and its Triton LLM-API "
                       "repository."),
    "plan": ("plan", "Will it fit, how fast will it be, and which trtllm-build limits to use (from config.json alone)."),
    "profiles": ("profiles", "Runnable, runnable-but-low-memory (with the fix) and incompatible (with the reason) profiles "
                             "per GPU x precision\nx backend, with why a profile cannot be built and served on this "
                             "machine and what the input still needs."),
    "render": ("render", "Render the Triton model repository for an engine (five models, engine, tokenizer) or for a "
                         "PyTorch-backend\ndeployable (NVIDIA's LLM-API model and the checkpoint): a self-contained bundle."),
    "serve": ("serve", "Serve REPO until Ctrl-C or SIGTERM: tritonserver (a model that fails to load is named with its log "
                       "line), or\nwith --api openai an OpenAI-compatible server for a PyTorch-backend deployable."),
    "smoke": ("smoke", "Run the smoke checks against a served model (Triton ensemble/BLS, Triton LLM-API, or OpenAI API);"
                       "\nexit 0 only when all pass (4 otherwise)."),
    "k8s": ("k8s", "Kubernetes manifests for Triton and trtllm-serve deployments."),
}


def load_command(name: str):
    """The click command `name` as its module registers it (the module imported now)."""
    module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
    holder = typer.Typer()
    module.register(holder)
    return typer.main.get_group(holder).get_command(None, name)  # type: ignore[arg-type]


class _LazyGroup(TyperGroup):
    """The root group: lists COMMANDS without importing them; imports one command when it is invoked."""

    _listing = False

    def list_commands(self, ctx) -> list[str]:  # noqa: ANN001
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name: str):  # noqa: ANN001
        if cmd_name not in COMMANDS:
            return None
        if self._listing:  # the root --help: the listed text only
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        return load_command(cmd_name)

    def format_help(self, ctx, formatter) -> None:  # noqa: ANN001
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="pipeline",
    help="Hugging Face checkpoint -> TensorRT-LLM checkpoint -> engine -> Triton repository -> smoke and latency gates.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
)

_DEBUG = {"on": False}


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.", envvar="PIPELINE_DEBUG"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only print results and errors."),
    verify: bool = typer.Option(False, "--verify", envvar="PIPELINE_VERIFY", help=(
        "Hash every file of an existing artifact before reusing it (default: size and mtime).")),
) -> None:
    from pipeline.core.artifacts import set_verify

    _DEBUG["on"] = debug
    OUT.quiet = quiet
    set_verify(verify)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI in-process and return its exit code (tests call this)."""
    from pipeline.core.processes import Terminated, terminate_as_interrupt

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

"""The project's own exception types. The CLI turns these (and only these) into one clear message.

Every error says what was wrong and, in `hint`, what would work instead. Anything else that escapes
a command is a bug and is shown as one (with the traceback under --debug).
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base for every error a user can cause and fix. Exit code 1 unless a subclass says otherwise."""

    exit_code: int = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nHint: {self.hint}"


class InvalidInputError(PipelineError):
    """Refused before any work: a bad flag value, source, GPU, precision or file. Exit code 2."""

    exit_code = 2


class UnsupportedError(InvalidInputError):
    """The request is well-formed but this GPU/model/runtime cannot do it. Exit code 2."""


class StageFailedError(PipelineError):
    """A stage started and failed (tool exit code, load failure, server never ready). Exit code 1."""


class ToolMissingError(PipelineError):
    """A required external tool (trtllm-build, tritonserver, mpirun) is not installed here. Exit code 3."""

    exit_code = 3


class GateFailedError(PipelineError):
    """A smoke, SLO or accuracy gate failed. Exit code 4 so CI can tell it from a crash."""

    exit_code = 4

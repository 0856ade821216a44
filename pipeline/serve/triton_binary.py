"""Find a runnable `tritonserver`: on PATH (the NGC image) or inside the `nvidia-pytriton` wheel.

The wheel ships the server, its bundled libraries and a Python-backend stub per Python version. Its
backends folder is copied once into a private cache with the stub for the running Python beside it, so
the site-packages copy is never modified and several servers can start at once.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import ToolMissingError, UnsupportedError


@dataclass(frozen=True)
class TritonBinary:
    """A runnable tritonserver: the executable, its backends folder (None: the binary's default)
    and the environment additions it needs."""

    path: Path
    backend_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    source: str = "PATH"


def find_tritonserver() -> TritonBinary:
    """`tritonserver` on PATH, else the one inside the nvidia-pytriton wheel (prepared to run here)."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonBinary(path=Path(on_path), source="PATH")
    try:
        import pytriton  # noqa: F401  (only to locate the wheel)
    except ImportError as error:
        raise ToolMissingError(
            "No tritonserver found: it is not on PATH and the nvidia-pytriton wheel is not installed.",
            hint="Run inside the NGC image (nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3) "
            "or `pip install nvidia-pytriton` (make install does).",
        ) from error
    dist = Path(pytriton.__file__).resolve().parent / "tritonserver"
    binary = dist / "bin" / "tritonserver"
    libs = dist.parent.parent / "nvidia_pytriton.libs"
    if not binary.is_file():
        raise ToolMissingError(f"The nvidia-pytriton wheel has no server binary at {binary}.",
                               hint="Reinstall nvidia-pytriton (0.7.x) or put tritonserver on PATH.")
    backend_dir = _private_backends(dist)
    library_path = [str(libs)]
    python_lib = _python_libdir()
    if python_lib:  # before the system's: the stub must run the same libpython as this interpreter
        library_path.insert(0, python_lib)
    env = {
        "LD_LIBRARY_PATH": _join_path(":".join(library_path), os.environ.get("LD_LIBRARY_PATH", "")),
        # the Python-backend stub embeds an interpreter: it must import from this environment
        "PATH": _join_path(str(Path(sys.executable).parent), os.environ.get("PATH", "")),
    }
    return TritonBinary(path=binary, backend_dir=backend_dir, env=env, source="nvidia-pytriton")


def _python_libdir() -> str | None:
    """The folder holding this interpreter's shared libpython, when it has one.

    The stub links libpython<major.minor>.so.1.0 by name; if the loader finds another build of the
    same minor version first (a distribution package beside a pyenv/conda Python), extension
    modules of this interpreter's stdlib fail with undefined symbols (e.g. _ssl: _PyModule_Add).
    """
    import sysconfig

    libdir = sysconfig.get_config_var("LIBDIR")
    name = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    if libdir and (Path(libdir) / name).is_file():
        return libdir
    return None


def _join_path(first: str, rest: str) -> str:
    return f"{first}:{rest}" if rest else first


def cache_dir() -> Path:
    base = os.environ.get("PIPELINE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trtllm-pipeline")
    return Path(base)


def _private_backends(dist: Path) -> Path:
    """A copy of the wheel's backends folder with the stub for this Python in backends/python/."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise UnsupportedError(
            f"nvidia-pytriton has no Python-backend stub for Python {version} ({stub} is missing).",
            hint="Use a Python version the wheel ships stubs for (3.8-3.13) or the NGC image.",
        )
    source = dist / "backends"
    key = f"{version}-{int(source.stat().st_mtime)}-{stub.stat().st_size}"
    target = cache_dir() / "triton-backends" / key
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(stub, tmp / "python" / "triton_python_backend_stub")
    try:
        os.replace(tmp, target)
    except OSError:  # another process won the race: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return target

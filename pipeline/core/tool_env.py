"""The environment each child process gets: NVIDIA's tools see the image's Python, never the pipeline's.

In the image the pipeline lives in its own virtual environment (/opt/pipeline: transformers 5,
ModelOpt 0.47), while TensorRT-LLM 1.1.0 and everything Triton runs for it need the image's own
python3 with the packages TensorRT-LLM pins (transformers 4.57.1, ModelOpt 0.37).

The Python backend's stub embeds CPython without naming a program (python_backend r25.12
src/pb_stub.cc:2041; it is started with execv, src/stub_launcher.cc:511). CPython then looks for
`python3` on PATH and, when the directory above the one it finds holds a `pyvenv.cfg`, takes that
virtual environment as its prefix. So whatever python3 is first on tritonserver's PATH decides which
packages preprocessing, postprocessing, BLS and the LLM-API model import, and mpirun's ranks inherit
the same PATH.

- `nvidia_environment`: the environment with every trace of the pipeline's virtual environment removed
  (its bin/ from PATH, VIRTUAL_ENV, PYTHONHOME, its folders from PYTHONPATH), for trtllm-build,
  trtllm-serve, mpirun and a tritonserver that serves NVIDIA's models.
- `pipeline_environment`: the pipeline's bin/ first on PATH, for the one server that must import the
  pipeline: a repository whose `tensorrt_llm` model is the CPU reference runtime.

Outside a virtual environment (the pipeline installed into the system Python) there is nothing to
remove, and both return the environment unchanged but for PATH order.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

_PYTHON_VARIABLES = ("VIRTUAL_ENV", "PYTHONHOME")


def pipeline_prefix() -> Path | None:
    """The pipeline's virtual environment (sys.prefix), or None when it runs in a base interpreter."""
    if sys.prefix == sys.base_prefix:
        return None
    return Path(sys.prefix).resolve()


def _inside(entry: str, prefix: Path) -> bool:
    if not entry:
        return False
    try:
        return Path(entry).resolve().is_relative_to(prefix)
    except OSError:
        return False


def _without(paths: str, prefix: Path) -> str:
    return os.pathsep.join(p for p in paths.split(os.pathsep) if p and not _inside(p, prefix))


def nvidia_environment(base: Mapping[str, str] | None = None, prefix: Path | None = None) -> dict[str, str]:
    """`base` (default os.environ) without the pipeline's virtual environment `prefix` (default: this one)."""
    env = dict(os.environ if base is None else base)
    prefix = prefix if prefix is not None else pipeline_prefix()
    if prefix is None:
        return env
    for name in ("PATH", "PYTHONPATH"):
        if name in env:
            kept = _without(env[name], prefix)
            if kept:
                env[name] = kept
            else:
                del env[name]
    for name in _PYTHON_VARIABLES:
        if name in env and _inside(env[name], prefix):
            del env[name]
    return env


def pipeline_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default os.environ) with this interpreter's bin/ first on PATH, so an embedded Python finds it."""
    env = dict(os.environ if base is None else base)
    own_bin = str(Path(sys.executable).parent)
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != own_bin]
    env["PATH"] = os.pathsep.join([own_bin, *rest])
    return env

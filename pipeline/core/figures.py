"""PNG reports: a matplotlib figure written the way every artifact is, through a temporary file beside it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pipeline.core.artifacts import temporary_beside


def write_figure_atomic(figure: Any, path: Path, *, dpi: int) -> None:
    """Save a matplotlib figure as a PNG at `path` through a temporary file beside it, and close the figure."""
    import matplotlib.pyplot as plt

    tmp = temporary_beside(path, ".tmp.png")
    try:
        figure.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        plt.close(figure)
        tmp.unlink(missing_ok=True)

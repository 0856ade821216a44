"""PNG reports: a matplotlib figure written the way every artifact is, through a temporary file beside it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any


def write_figure_atomic(figure: Any, path: Path, *, dpi: int) -> None:
    """Save a matplotlib figure as a PNG at `path` through a temporary file beside it, and close the figure."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp.png")
    try:
        figure.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        plt.close(figure)
        tmp.unlink(missing_ok=True)

"""The Pareto front of SLO-feasible builds: tokens/s per user (interactivity) against tokens/s per GPU
(cost), and its plot beside the plan's JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence, TypeVar

from pipeline.core.figures import write_figure_atomic


class Point(Protocol):
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float


P = TypeVar("P", bound=Point)


def pareto_front(points: Sequence[P]) -> list[P]:
    """The points no other point beats on both axes (ties kept once), fastest per user first."""
    ordered = sorted(points, key=lambda p: (-p.tokens_per_s_per_user, -p.tokens_per_s_per_gpu))
    front: list[P] = []
    best_gpu = float("-inf")
    for point in ordered:
        if point.tokens_per_s_per_gpu > best_gpu:
            front.append(point)
            best_gpu = point.tokens_per_s_per_gpu
    return front


def plot_front(cloud: Sequence[tuple[float, float]], front: Sequence[P], path: Path, title: str, labels: Sequence[str] = ()) -> Path:
    """Every feasible build as a dot, the front as a line with its builds named; PNG at path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.scatter([x for x, _ in cloud], [y for _, y in cloud],
               s=10, alpha=0.35, color="tab:gray", label="builds meeting the SLO")
    ax.plot([p.tokens_per_s_per_user for p in front], [p.tokens_per_s_per_gpu for p in front],
            marker="o", color="tab:blue", label="Pareto front")
    for point, label in zip(front, labels):
        ax.annotate(label, (point.tokens_per_s_per_user, point.tokens_per_s_per_gpu), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=110)
    return path


def write_plan_report(result, folder: Path) -> dict[str, Path]:
    """plan.json (the whole search result) and pareto.png beside it, in `folder`."""
    from pipeline.core.artifacts import write_json_atomic
    from pipeline.planner.slo import bounds_text

    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / "plan.json"
    write_json_atomic(json_path, result.model_dump(mode="json"))
    slo = bounds_text(result.slo)
    labels = [f"{c.parallel} {c.gpu} {c.quant} b{c.max_batch_size} c{c.concurrency}" for c in result.pareto]
    png = plot_front(result.points, result.pareto, folder / "pareto.png",
                     f"{result.model}: ISL {result.isl} / OSL {result.osl}, {slo}", labels)
    return {"json": json_path, "plot": png}

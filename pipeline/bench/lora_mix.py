"""`pipeline bench --lora-mix A=0.5,B=0.3,base=0.2`: a share of the requests per adapter (and `base`: no adapter),
and what adapters cost against base requests, per class (TTFT, TPOT, output tokens/s).

An adapter is named as the deployment names it: a task id (digits), or a name that `--lora-source FOLDER` (an
engine folder, a rendered bundle or a PyTorch deployable; its manifest's "lora") maps to a task id. A request
to a Triton model sends `lora_task_id` only: the deployment prefetched the weights (lora_prefetch_dir). A request
to trtllm-serve sends the body extension `lora_request` {lora_name, lora_int_id, lora_path} (the 1.1.0 example
https://nvidia.github.io/TensorRT-LLM/1.1.0/examples/openai_completion_client_for_lora.html, lines 17-27;
lora_path is a path on the server: the deployable's lora/<name>/).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from pipeline.core.artifacts import read_manifest
from pipeline.core.errors import InvalidInputError

BASE = "base"
HINT = "Use NAME=FRACTION,... summing to 1, e.g. --lora-mix sql=0.5,chat=0.3,base=0.2 (NAME: a task id or an adapter name)."


@dataclass(frozen=True)
class LoraClass:
    name: str
    fraction: float
    task_id: int | None = None  # None: base
    path: str | None = None  # the adapter on the server (trtllm-serve's lora_path)


def parse_lora_mix(text: str) -> tuple[tuple[str, float], ...]:
    """`A=0.5,B=0.3,base=0.2` -> ((A, 0.5), ...); fractions positive, summing to 1."""
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            raise InvalidInputError(f"--lora-mix {part!r}: {value!r} is not a fraction.", hint=HINT) from None
        if not sep or not name.strip() or fraction <= 0:
            raise InvalidInputError(f"--lora-mix {part!r}: expected NAME=FRACTION with a fraction above 0.", hint=HINT)
        pairs.append((name.strip(), fraction))
    names = [name for name, _ in pairs]
    if not pairs or len(set(names)) != len(names):
        raise InvalidInputError(f"--lora-mix {text!r}: each class once, at least one.", hint=HINT)
    if abs(sum(f for _, f in pairs) - 1.0) > 1e-6:
        raise InvalidInputError(f"--lora-mix {text!r}: the fractions sum to {sum(f for _, f in pairs):g}, not 1.", hint=HINT)
    if "0" in names:
        raise InvalidInputError("--lora-mix: task id 0 means 'no LoRA'; call those requests `base`.", hint=HINT)
    return tuple(pairs)


def source_adapters(source: Path | None) -> dict[str, dict[str, Any]]:
    """name -> {task_id, path} from a deployment folder's manifest "lora" (an engine or deployable folder, or a
    bundle: its engine is at tensorrt_llm/1/)."""
    if source is None:
        return {}
    for folder in (Path(source), Path(source) / "tensorrt_llm" / "1"):
        lora = (read_manifest(folder) or {}).get("lora")
        if lora:
            paths = {a["name"]: a.get("path") for a in lora.get("adapters") or []}
            return {name: {"task_id": int(task), "path": paths.get(name) or str(folder / "lora" / name)}
                    for name, task in (lora.get("task_ids") or {}).items()}
    raise InvalidInputError(f"--lora-source {source}: no LoRA adapters recorded there.",
                            hint="Point at the engine folder, bundle or deployable built with `pipeline build --lora`.")


def resolve_classes(mix: Sequence[tuple[str, float]], source: Path | None) -> tuple[LoraClass, ...]:
    known = source_adapters(source)
    classes = []
    for name, fraction in mix:
        if name == BASE:
            classes.append(LoraClass(name, fraction))
        elif name in known:
            classes.append(LoraClass(name, fraction, known[name]["task_id"], known[name]["path"]))
        elif name.isdigit():
            classes.append(LoraClass(name, fraction, int(name)))
        else:
            raise InvalidInputError(f"--lora-mix {name}: not a task id, and not an adapter of "
                                    f"{source or 'the deployment (no --lora-source given)'}.",
                                    hint=f"Known: {', '.join(sorted(known)) or 'none'}; or give task ids.")
    return tuple(classes)


def assign(requests: list, classes: Sequence[LoraClass], seed: int = 0) -> list:
    """Each request with its class (BenchRequest.adapter / lora_task_id / lora_path): the shares exact up to rounding
    (largest remainder), the order shuffled with the seed so that classes interleave."""
    n = len(requests)
    counts = [int(c.fraction * n) for c in classes]
    by_remainder = sorted(range(len(classes)), key=lambda i: classes[i].fraction * n - counts[i], reverse=True)
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    labels = [c for c, k in zip(classes, counts) for _ in range(k)]
    random.Random(seed).shuffle(labels)
    return [replace(r, adapter=c.name, lora_task_id=c.task_id, lora_path=c.path) for r, c in zip(requests, labels)]


def class_summaries(metrics: Sequence[Any], classes_of: dict[int, str], window_s: float) -> dict[str, Any]:
    """Per class: requests, TTFT / TPOT statistics and output tokens/s (the class's tokens over the level's window);
    and each adapter's cost against base: the ratio of its p50 TTFT and TPOT to base's, and of its mean per-user
    output tokens/s."""
    from pipeline.bench.stats import summarize

    out: dict[str, Any] = {}
    for name in dict.fromkeys(classes_of.values()):
        mine = [m for m in metrics if classes_of.get(m.index) == name]
        good = [m for m in mine if m.ok]
        out[name] = {"requests": len(mine), "completed": len(good),
                     "ttft_ms": summarize(m.ttft_ms for m in good), "tpot_ms": summarize(m.tpot_ms for m in good),
                     "output_tok_s": sum(m.osl or 0 for m in good) / max(window_s, 1e-9),
                     "output_tok_s_per_user": summarize(m.output_tok_s for m in good)}
    base = out.get(BASE)
    for name, row in out.items():
        if name != BASE and base:
            row["vs_base"] = {"ttft_p50": _ratio(row["ttft_ms"], base["ttft_ms"], "p50"),
                              "tpot_p50": _ratio(row["tpot_ms"], base["tpot_ms"], "p50"),
                              "output_tok_s_per_user": _ratio(row["output_tok_s_per_user"], base["output_tok_s_per_user"], "mean")}
    return out


def _ratio(mine: dict | None, base: dict | None, key: str) -> float | None:
    if not mine or not base or not mine.get(key) or not base.get(key):
        return None
    return mine[key] / base[key]


ROW_COLUMNS = ["load", "class", "requests", "TTFT p50 ms", "TPOT p50 ms", "out tok/s", "TTFT / base", "TPOT / base",
               "tok/s per user / base"]


def class_rows(levels: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per level and class, for the terminal and summary.md."""
    def f(value: Any, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    rows = []
    for level in levels:
        for name, row in (level.get("adapters") or {}).items():
            cost = row.get("vs_base") or {}
            rows.append([level["load"], name, str(row["requests"]), f(row["ttft_ms"]["p50"], 1), f(row["tpot_ms"]["p50"]),
                         f(row["output_tok_s"], 1), f(cost.get("ttft_p50")), f(cost.get("tpot_p50")),
                         f(cost.get("output_tok_s_per_user"))])
    return rows

"""`pipeline gpus`: the GPU table."""

from __future__ import annotations

import typer

from pipeline.cli._options import JsonOpt, set_json
from pipeline.core.gpus import gpu_table
from pipeline.core.output import OUT, simple_table


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus)


def gpus(json_output: JsonOpt = False) -> None:
    """List the GPUs the pipeline knows: datasheet figures and the precisions each can run."""
    set_json(json_output)
    table = gpu_table()
    rows = [
        [
            g.key, g.product_label or "-", g.compute_capability or "-", _n(g.memory_gib), _n(g.hbm_bandwidth_tbps),
            _n(g.dense_bf16_tflops), _n(g.dense_fp8_tflops), _n(g.dense_int8_tops),
            ",".join(g.weight_precisions), ",".join(g.kv_precisions),
        ]
        for g in table.values()
    ]
    data = [
        {**g.model_dump(), "weight_precisions": g.weight_precisions, "kv_precisions": g.kv_precisions}
        for g in table.values()
    ]
    OUT.result(
        data,
        table=simple_table(
            "GPUs (dense rates; memory in GiB, bandwidth in TB/s)",
            ["key", "product label", "SM", "mem", "BW", "BF16 TF", "FP8 TF", "INT8 TOPS", "weights", "KV cache"],
            rows,
        ),
    )


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"

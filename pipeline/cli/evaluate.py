"""`pipeline evaluate`: perplexity and next-token agreement per precision, and the accuracy gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from pipeline.cli._options import DeviceOpt, ForceOpt, JsonOpt, KvCacheOpt, OutDirOpt, set_json, spec_from_options
from pipeline.quantization.calibration import DEFAULT_CALIB_SIZE
from pipeline.evaluate.gate import check_gate
from pipeline.evaluate.report import TABLE_COLUMNS, table_rows
from pipeline.evaluate.spec import DEFAULT_MAX_DELTA, EvaluateSpec
from pipeline.jobs import run_evaluation
from pipeline.core.output import OUT, simple_table
from pipeline.core.reporting import OutputReporter

ModelOpt = Annotated[
    str,
    typer.Option("--model", help="HF checkpoint folder (e.g. build/<model>/hf) or a download SOURCE such as `demo`.", show_default=False),
]
QuantsOpt = Annotated[
    List[str],
    typer.Option("--quant", help="Format to measure; repeat for several: fp16, bf16, fp8, int8_sq, int8_wo, int4_wo, int4_awq, w4a8_awq, nvfp4.", show_default=False),
]
DataOpt = Annotated[
    Optional[Path],
    typer.Option("--data", help="Evaluation text: .txt (paragraphs split by blank lines) or .jsonl ({\"text\": ...}). Default: the shipped set."),
]
MaxDeltaOpt = Annotated[
    float, typer.Option("--max-delta", min=0.0, help="Largest allowed relative perplexity rise over the baseline (0.10 = +10%).")
]
CalibSizeOpt = Annotated[int, typer.Option("--calib-size", min=1, help="Calibration texts for formats that calibrate.")]
CalibDataOpt = Annotated[
    Optional[Path], typer.Option("--calib-data", help="Calibration text, as for `pipeline convert` (default: the shipped set).")
]
MaxTextsOpt = Annotated[Optional[int], typer.Option("--max-texts", min=1, help="Score only the first N evaluation texts.")]
RecordOpt = Annotated[
    Optional[Path],
    typer.Option("--record-in", help="Checkpoint folder whose manifest.json gets the figures (under \"evaluation\"), pass or fail."),
]
MaxLenOpt = Annotated[int, typer.Option("--max-len", min=8, help="Evaluation window in tokens (longer texts are split).")]


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)


def evaluate(
    model: ModelOpt,
    quant: QuantsOpt,
    kv_cache: KvCacheOpt = None,
    data: DataOpt = None,
    max_delta: MaxDeltaOpt = DEFAULT_MAX_DELTA,
    calib_size: CalibSizeOpt = DEFAULT_CALIB_SIZE,
    calib_data: CalibDataOpt = None,
    max_texts: MaxTextsOpt = None,
    max_len: MaxLenOpt = 512,
    out: OutDirOpt = None,
    record_in: RecordOpt = None,
    device: DeviceOpt = "auto",
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Measure perplexity and top-1 agreement of each --quant format against the unquantized model
    (ModelOpt simulated quantization on the CPU) and fail (exit 4) when perplexity rises more than --max-delta.

    Reports (JSON, CSV, Markdown, PNG) go to build/<model>/reports/evaluate-<id>/ (or under --out).
    """
    set_json(json_output)
    spec = spec_from_options(  # the spec checks --device
        EvaluateSpec.from_formats, model=model, quants=quant, kv_cache=kv_cache,
        data=data, max_delta=max_delta, calib_size=calib_size, calib_data=calib_data, max_texts=max_texts, max_len=max_len, out=out, force=force,
        device=device,
    )
    result = run_evaluation(spec, record_in=record_in, reporter=OutputReporter())
    if result.cached:
        OUT.info(f"up to date: {result.report_dir} (same checkpoint, data and formats; --force measures again)")
    for row in result.rows():
        if row.note:
            OUT.warn(f"{row.name}: {row.note}")
    OUT.result(
        result,
        table=simple_table(
            f"{result.model}: {result.dataset['tokens']} tokens, gate +{result.max_delta:.0%}", TABLE_COLUMNS, table_rows(result)
        ),
        text=f"reports: {result.report_dir}",
    )
    check_gate(result)

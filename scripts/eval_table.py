#!/usr/bin/env python3
"""The accuracy table for one model across fp16, fp8, fp8 + fp8 KV cache, int8_sq, int8_wo, int4_wo and
int4_awq (ModelOpt simulated quantization on the CPU), plus what simulated quantization costs in
greedy decoding speed (batch 1) for the reference runtime.

    .venv/bin/python scripts/eval_table.py                      # the demo model, whole eval set
    .venv/bin/python scripts/eval_table.py --model build/m/hf --max-texts 8 --no-speed

Prints a Markdown table; the full reports land in build/<model>/reports/evaluate-<id>/ and the speed
figures in build/<model>/reports/simulated-speed.json.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.core.artifacts import write_json_atomic
from pipeline.core.errors import PipelineError
from pipeline.evaluate import evaluate
from pipeline.evaluate.report import markdown_report
from pipeline.evaluate.spec import EvaluateSpec
from pipeline.quantization.simulated import Variant
from pipeline.core.output import to_jsonable

VARIANTS = (
    Variant(quant="fp16"),
    Variant(quant="fp8"),
    Variant(quant="fp8", kv_cache="fp8"),
    Variant(quant="int8_sq"),
    Variant(quant="int8_wo"),
    Variant(quant="int4_wo"),
    Variant(quant="int4_awq"),
)
SPEED_FORMATS = ("fp16", "int8_sq", "fp8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="HF checkpoint folder or download SOURCE (default: demo)")
    parser.add_argument("--max-texts", type=int, default=None, help="score only the first N evaluation texts")
    parser.add_argument("--calib-size", type=int, default=64)
    parser.add_argument("--max-delta", type=float, default=0.10)
    parser.add_argument("--force", action="store_true", help="measure again even if the same report exists")
    parser.add_argument("--no-speed", action="store_true", help="skip the greedy-decoding speed measurement")
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args(argv)

    try:
        spec = EvaluateSpec(model=args.model, variants=VARIANTS, max_texts=args.max_texts, calib_size=args.calib_size,
                            max_delta=args.max_delta, force=args.force)
        result = evaluate(spec)
        print(markdown_report(result))
        print(f"reports: {result.report_dir}\n")
        if not args.no_speed:
            from pipeline.quantization.simulated import measure_speed

            speeds = measure_speed(result.hf_dir, list(SPEED_FORMATS), new_tokens=args.new_tokens,
                                   calib_size=args.calib_size)
            base = speeds[0].tokens_per_s
            print(f"Greedy decoding, batch 1, {speeds[0].prompt_tokens}-token prompt, {args.new_tokens} new tokens, "
                  f"{speeds[0].threads} CPU threads (median of {len(speeds[0].runs)} runs):\n")
            print("| format | tokens/s | vs fp16 | runs | load + calibrate (s) |\n|---|---|---|---|---|")
            for s in speeds:
                label = "fp16 (weights rounded, fp32 compute)" if s.name == "fp16" else f"{s.name} (fake quant)"
                print(f"| {label} | {s.tokens_per_s:.2f} | {s.tokens_per_s / base:.2f}x | "
                      f"{', '.join(f'{r:.2f}' for r in s.runs)} | {s.load_s:.1f} |")
            write_json_atomic(result.report_dir.parent / "simulated-speed.json", to_jsonable(speeds))
    except PipelineError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    return 0 if result.passed else 4


if __name__ == "__main__":
    sys.exit(main())

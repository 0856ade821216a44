"""Options shared by several commands, declared once so names and help never drift."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from pipeline.errors import InvalidInputError
from pipeline.output import OUT
from pipeline.planner.scenario import GOALS, Goal


def parse_goal(value: str) -> Goal:
    """--goal: our own message (exit 2) for a value that is not a goal, as every command said before."""
    if value not in GOALS:
        raise InvalidInputError(f"Unknown goal {value!r}.", hint="Use --goal latency or --goal throughput.")
    return value  # type: ignore[return-value]


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (no progress bars).")]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU key from `pipeline gpus` (or `cpu` for the reference runtime).")]
QuantOpt = Annotated[str, typer.Option("--quant", help="fp16, bf16, fp8, int8_sq, int8_wo, int4_wo, int4_awq, w4a8_awq, nvfp4.")]
KvCacheOpt = Annotated[Optional[str], typer.Option("--kv-cache", help="KV-cache precision: fp8 or int8 (default: model dtype).")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel size.")]
GoalOpt = Annotated[Goal, typer.Option("--goal", parser=parse_goal, help="latency (small batch, one optimisation "
                                       "profile) or throughput (large batch, multiple profiles): what the build optimises.")]
PpOpt = Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel size.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Redo the stage even if an identical artifact exists.")]
OutDirOpt = Annotated[Optional[Path], typer.Option("--out", help="Output folder (default: under build/).")]
UrlOpt = Annotated[str, typer.Option("--url", help="Triton gRPC endpoint HOST:PORT, or an OpenAI-compatible server "
                                     "http(s)://HOST:PORT/v1 (trtllm-serve, transformers serve); the contract is detected.")]
EndpointOpt = Annotated[str, typer.Option("--endpoint", help="OpenAI servers: chat (/v1/chat/completions; the server "
                                          "applies the chat template) or completions (/v1/completions, raw text).")]
DeviceOpt = Annotated[
    str, typer.Option("--device", help="auto: every visible GPU (accelerate device_map) when the model fits, else the "
                      "CPU with a time estimate; cuda or cpu force one (refused, exit 2, when it does not fit).")
]
ServedModelOpt = Annotated[Optional[str], typer.Option("--model", help="Served model to call: ensemble or tensorrt_llm_bls "
                                                      "(default ensemble, else the LLM-API tensorrt_llm model); the "
                                                      "OpenAI model id (default: the one /v1/models lists).")]


def set_json(json_output: bool) -> None:
    OUT.json_mode = json_output


def spec_from_options(cls, **values):
    """Build a frozen pydantic spec from command options; the first validation error becomes one
    InvalidInputError naming the option, instead of a pydantic traceback."""
    from pydantic import ValidationError

    try:
        return cls(**values)
    except ValidationError as error:
        first = error.errors()[0]
        option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "input"
        raise InvalidInputError(f"{option}: {first['msg']} (got {first.get('input')!r}).",
                                hint="See --help for the accepted values.") from None

BackendOpt = Annotated[str, typer.Option(
    "--backend", help="tensorrt (an engine, trtllm-build) or pytorch (TensorRT-LLM's LLM API: the HF checkpoint from "
    "`pipeline convert --format hf` plus LLM-API options; no engine).")]

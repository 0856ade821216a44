"""Options shared by several commands, declared once so names and help never drift."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Optional, get_args

import typer

from pipeline.core.deployable import Backend
from pipeline.core.errors import InvalidInputError
from pipeline.core.output import OUT
from pipeline.planner.scenario import GOALS, Goal


def one_of(option: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    """A Typer parser for an option that takes one word of a closed set: any other word gets our own
    message naming the choices (exit 2), before the command runs."""

    def parse(value: str) -> str:
        if value not in choices:
            raise InvalidInputError(f"Unknown {option.removeprefix('--')} {value!r}.",
                                    hint="Use " + " or ".join(f"{option} {choice}" for choice in choices) + ".")
        return value

    return parse


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON (no progress bars).")]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU key from `pipeline gpus` (or `cpu` for the reference runtime).")]
QuantOpt = Annotated[str, typer.Option("--quant", help="fp16, bf16, fp8, int8_sq, int8_wo, int4_wo, int4_awq, w4a8_awq, nvfp4.")]
KvCacheOpt = Annotated[Optional[str], typer.Option("--kv-cache", help="KV-cache precision: fp8 or int8 (default: model dtype).")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel size.")]
GoalOpt = Annotated[Goal, typer.Option("--goal", parser=one_of("--goal", GOALS), help="latency (small batch, one optimisation "
                                       "profile) or throughput (large batch, multiple profiles): what the build optimises.")]
PpOpt = Annotated[int, typer.Option("--pp", min=1, help="Pipeline-parallel size.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Redo the stage even if an identical artifact exists.")]
OutDirOpt = Annotated[Optional[Path], typer.Option("--out", help="Output folder (default: under build/).")]
UrlOpt = Annotated[str, typer.Option("--url", help="Triton gRPC endpoint HOST:PORT, or an OpenAI-compatible server "
                                     "http(s)://HOST:PORT/v1 (trtllm-serve, transformers serve); the contract is detected.")]
EndpointOpt = Annotated[str, typer.Option("--endpoint", parser=one_of("--endpoint", ("chat", "completions")), help="OpenAI servers: chat (/v1/chat/completions; the server "
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


def resolve_gpu(gpu: str) -> str:
    """--gpu auto: this machine's GPU from the table (said on stderr; exit 2 for a GPU the table lacks);
    any other value as given."""
    if gpu != "auto":
        return gpu
    from pipeline.core.host import detect_gpu_key

    key = detect_gpu_key()
    OUT.info(f"--gpu auto: {key}")
    return key


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

BACKENDS: tuple[str, ...] = get_args(Backend)
APIS = ("triton", "openai")  # what `pipeline serve` and `pipeline k8s render` serve: tritonserver, or an OpenAI server
BackendOpt = Annotated[str, typer.Option(
    "--backend", parser=one_of("--backend", BACKENDS), help="tensorrt (an engine, trtllm-build) or pytorch (TensorRT-LLM's LLM API: the HF checkpoint from "
    "`pipeline convert --format hf` plus LLM-API options; no engine).")]
AttentionDpOpt = Annotated[bool, typer.Option(
    "--attention-dp", help="--backend pytorch, MoE models: attention data parallelism with the experts spread over the --tp "
                           "GPUs (enable_attention_dp, moe_expert_parallel_size = tp; NVIDIA's DEP). With --slo: search DEP "
                           "only (without it the search weighs DEP beside TP for an MoE).")]

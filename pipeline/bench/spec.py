"""The options of one benchmark run, validated once and passed whole."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.core.errors import InvalidInputError


class Dist(BaseModel):
    """A token-length distribution: normal(mean, std), rounded and clipped to >= 1."""

    model_config = ConfigDict(frozen=True)

    mean: int = Field(ge=1)
    std: float = Field(0.0, ge=0)

    @classmethod
    def parse(cls, text: str, *, what: str) -> "Dist":
        match = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+(?:\.\d+)?)\s*)?", text)
        if not match or int(match.group(1)) < 1:
            raise InvalidInputError(f"Invalid {what} {text!r}.", hint=f"Use MEAN or MEAN:STD in tokens, e.g. {what} 128:16.")
        return cls(mean=int(match.group(1)), std=float(match.group(2) or 0))

    def __str__(self) -> str:
        return f"{self.mean}" + (f":{self.std:g}" if self.std else "")


# metric key in a level summary -> (slo name stem, unit)
SLO_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "tpot_ms", "latency": "latency_ms"}
SLO_STATS = ("mean", "min", "max", "p50", "p90", "p95", "p99")
SLO_SCALARS = {
    # name -> (summary key, "max" = value must be <= bound, "min" = value must be >= bound)
    "error_rate": ("error_rate", "max"),
    "output_tok_s": ("output_tok_s", "min"),
    "requests_s": ("requests_s", "min"),
}


class Slo(BaseModel):
    """One gate: `name` compared with `bound` on every measured level."""

    model_config = ConfigDict(frozen=True)

    name: str
    bound: float
    key: str  # where the value lives in a level summary: "ttft_ms.p99" or "error_rate"
    direction: Literal["max", "min"]


def parse_slo(text: str) -> Slo:
    """`ttft_p99_ms=500`, `tpot_p99_ms=50`, `latency_p95_ms=2000`, `error_rate=0`, `output_tok_s=100`."""
    name, sep, value = text.partition("=")
    name = name.strip()
    hint = ("Use NAME=VALUE with NAME one of <ttft|tpot|itl|latency>_<mean|p50|p90|p95|p99|max>_ms, "
            "error_rate, output_tok_s, requests_s; e.g. --slo ttft_p99_ms=500 --slo error_rate=0.")
    try:
        bound = float(value)
    except ValueError:
        raise InvalidInputError(f"Invalid SLO {text!r}: {value!r} is not a number.", hint=hint) from None
    if not sep:
        raise InvalidInputError(f"Invalid SLO {text!r}: no '='.", hint=hint)
    if name in SLO_SCALARS:
        key, direction = SLO_SCALARS[name]
        return Slo(name=name, bound=bound, key=key, direction=direction)
    match = re.fullmatch(r"(ttft|tpot|itl|latency)_(mean|min|max|p50|p90|p95|p99)_ms", name)
    if not match:
        raise InvalidInputError(f"Unknown SLO {name!r}.", hint=hint)
    return Slo(name=name, bound=bound, key=f"{SLO_METRICS[match.group(1)]}.{match.group(2)}", direction="max")


class BenchSpec(BaseModel):
    """Everything one `pipeline bench` run needs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str  # Triton gRPC HOST:PORT, or an OpenAI base URL http(s)://HOST:PORT/v1
    model: str | None = None  # None: ensemble (else the LLM-API model), or the OpenAI server's model
    endpoint: Literal["chat", "completions"] = "chat"  # OpenAI servers only
    concurrency: tuple[int, ...] = (1,)
    rate: tuple[float, ...] = ()  # requests/s; when given, request-rate mode replaces the concurrency sweep
    arrival: Literal["poisson", "constant"] = "poisson"
    requests: int | None = Field(None, ge=1)  # per level
    duration_s: float | None = Field(None, gt=0)  # per level
    warmup: int = Field(2, ge=0)
    isl: Dist = Dist(mean=128)
    osl: Dist = Dist(mean=32)
    dataset: Path | None = None
    tokenizer: Path | None = None
    slo: tuple[Slo, ...] = ()
    out: Path | None = None
    metrics_url: str | None = None
    seed: int = 0
    request_timeout_s: float = Field(600.0, gt=0)
    perf_metrics: bool = False  # ask the server for its own timestamps (return_perf_metrics)
    prefill_decode: bool = False
    pd_isl: tuple[int, ...] = (32, 64, 128, 256, 512)
    pd_osl: tuple[int, ...] = (8, 16, 32, 64, 128)
    gpu: str | None = None
    quant: str | None = None
    lora_mix: tuple[tuple[str, float], ...] = ()  # --lora-mix (pipeline/bench/lora_mix.py)
    lora_source: Path | None = None  # the deployment folder whose manifest names the adapters
    speculative: bool = False  # compare with `baseline`, the same model served without speculation (bench/speculative.py)
    baseline: str | None = None
    baseline_model: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "BenchSpec":
        if any(c < 1 for c in self.concurrency) or not self.concurrency:
            raise InvalidInputError("--concurrency needs positive integers, e.g. 1,2,4,8.")
        if any(r <= 0 for r in self.rate):
            raise InvalidInputError("--rate needs positive requests/s values, e.g. 2 or 1,2,4.")
        if any(v < 1 for v in (*self.pd_isl, *self.pd_osl)):
            raise InvalidInputError("--pd-isl/--pd-osl need positive token counts.")
        return self

    def level_requests(self, concurrency: int) -> int | None:
        """Requests per level: as given; unbounded when only a duration is given; else 4 per slot (>= 8)."""
        if self.requests is not None:
            return self.requests
        if self.duration_s is not None:
            return None
        return max(8, 4 * concurrency)

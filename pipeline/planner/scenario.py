"""The one value the planner works on: a model on a GPU at a precision, a TP size and a workload.

A `Scenario` is made once (names resolved to the GPU table's and the precision tables' entries, a
model folder read into its shapes) and passed whole; `check()` adds every refusal that needs no
arithmetic. `Goal` is what a build optimises (the planner's recommendation, the build profile, the CLI).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import GpuSpec, check_one_cpu_process, check_precision, get_gpu
from pipeline.planner.rates import require_figures
from pipeline.planner.shapes import ModelSpec, check_attention_dp, check_tp, model_spec_from_config
from pipeline.planner.stages import check_pp, pipeline_stage
from pipeline.core.quant import KvCacheFormat, QuantFormat, kv_cache_format, quant_format

Goal = Literal["latency", "throughput"]
GOALS: tuple[str, ...] = get_args(Goal)


def as_quant(quant: QuantFormat | str) -> QuantFormat:
    return quant if isinstance(quant, QuantFormat) else quant_format(quant)


def as_kv(kv: KvCacheFormat | str | None) -> KvCacheFormat:
    return kv if isinstance(kv, KvCacheFormat) else kv_cache_format(kv)


def as_gpu(gpu: GpuSpec | str) -> GpuSpec:
    return gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)


def as_model(model: ModelSpec | str | Path) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else model_spec_from_config(model)


SIXTEEN_BIT = ("fp16", "bf16")


def stored_precision(model: ModelSpec, quant: str | None, *, default: str = "fp16") -> str:
    """The precision to plan `model` at: `quant` where given, else what its checkpoint declares it stores
    (checkpoint.checkpoint_precision), else `default`. A quantized checkpoint is planned as it is stored: a --quant its
    weights are not in is refused (fp16 and bf16 stand for each other; a checkpoint of 16-bit weights may be planned at
    any precision, as its source could be), as is a quantization the planner cannot read left unnamed."""
    declared = model.checkpoint_quant
    if quant is None:
        if model.unread_quantization:
            raise InvalidInputError(
                f"{model.name}'s checkpoint declares {model.unread_quantization}, which the planner does not read.",
                hint="Name how its linear layers are stored with --quant (fp8, nvfp4, int4_awq, int8_wo, ...).")
        return declared or default
    name = quant_format(quant).name
    quantized = declared and (declared not in SIXTEEN_BIT or model.expert_weights)  # 16-bit weights: any --quant is a what-if
    if quantized and name != declared and not {name, declared} <= set(SIXTEEN_BIT):
        stored = declared + (" with MXFP4 experts" if model.expert_weights else "")
        raise InvalidInputError(
            f"{model.name} is a quantized checkpoint: its weights are stored as {stored} (config.json quantization_config "
            f"or hf_quant_config.json), so --quant {name} would plan weights it does not have.",
            hint=f"Leave --quant out (or pass --quant {declared}); to compare precisions, plan the 16-bit checkpoint it was "
                 "made from.")
    return name


@dataclass(frozen=True)
class Scenario:
    """model x gpu x quant x kv cache x tp, serving prompts of `isl` tokens and `osl` generated tokens.

    Names are resolved when it is made: `model` may be a ModelSpec or an HF folder / config.json,
    `gpu` a GPU-table key or alias, `quant` and `kv` precision names (kv None: the 16-bit default).

    attention_dp: the PyTorch backend's attention data parallelism with the experts spread over the same GPUs
    (enable_attention_dp, moe_expert_parallel_size = tp; NVIDIA's "DEP"): each of the `tp` GPUs holds the whole
    attention (and every weight but the routed experts) and its own requests' KV cache, and schedules its own batch;
    the MoE layers gather all GPUs' tokens, each GPU running 1/tp of the experts on them. Memory plans, build limits
    and iteration loads are then one GPU's.

    pp: pipeline stages, each of tp GPUs holding its share of the layers (planner.stages), with pp micro-batches in
    flight. Memory plans are one stage's GPU's; an iteration's phases are a micro-batch's way through all the stages.
    """

    model: ModelSpec
    gpu: GpuSpec
    quant: QuantFormat
    kv: KvCacheFormat
    tp: int = 1
    isl: int = 1024
    osl: int = 128
    attention_dp: bool = False
    pp: int = 1

    @property
    def attention_tp(self) -> int:
        """The GPUs one attention layer is split over: 1 with attention data parallelism, else tp."""
        return 1 if self.attention_dp else self.tp

    @property
    def ranks(self) -> int:
        """The GPUs that schedule requests apart (attention data parallelism: each of the tp), else 1."""
        return self.tp if self.attention_dp else 1

    @property
    def lanes(self) -> int:
        """The batches scheduled apart and run side by side: each attention-DP rank's, times the pp micro-batches."""
        return self.ranks * self.pp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def stage(self) -> Scenario:
        """One pipeline stage as a scenario of its own (pipeline_stage: the fullest); the scenario itself without PP."""
        return self if self.pp == 1 else self.replace(model=pipeline_stage(self.model, self.pp), pp=1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_model(self.model))
        object.__setattr__(self, "gpu", as_gpu(self.gpu))
        object.__setattr__(self, "quant", as_quant(self.quant))
        object.__setattr__(self, "kv", as_kv(self.kv))

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)

    def check(self) -> Scenario:
        """Every refusal that needs no arithmetic: GPU figures, precision support, TP split, lengths."""
        require_figures(self.gpu)
        check_precision(self.gpu, self.quant, self.kv)
        if self.attention_dp:
            check_attention_dp(self.model, self.tp)
        else:
            check_tp(self.model, self.tp)
        check_pp(self.model, self.pp)
        if self.gpu.is_cpu:  # as pipeline build --gpu cpu refuses it (build/parallel.py, build/__init__.py)
            check_one_cpu_process(self.tp, self.pp)
        if self.isl < 1 or self.osl < 1:
            raise InvalidInputError("ISL and OSL must be at least 1 token.", hint="e.g. --isl 1024 --osl 128")
        window = self.model.max_position_embeddings
        if window and self.isl + self.osl > window:
            raise InvalidInputError(
                f"ISL+OSL = {self.isl + self.osl} exceeds {self.model.name}'s context window ({window} tokens).",
                hint=f"Keep --isl + --osl <= {window}.",
            )
        return self

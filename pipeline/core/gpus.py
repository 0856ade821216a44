"""The GPU table (pipeline/data/gpus.json) and the checks that refuse what a GPU cannot run."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS, KvCacheFormat, QuantFormat
from pipeline.data import packaged_fact_rows

ALIASES = {"h100": "h100-sxm", "a100": "a100-80gb", "gh200-480gb": "gh200", "reference": "cpu"}


class GpuSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    product_label: str
    compute_capability: str | None
    architecture: str
    memory_gib: float | None
    hbm_bandwidth_tbps: float | None
    dense_bf16_tflops: float | None
    dense_fp8_tflops: float | None
    dense_int8_tops: float | None
    nvlink: bool
    runtime: str  # "tensorrtllm" or "reference"
    figures_note: str = ""
    device_memory_gib: float | None = None  # what the device reports where it differs from memory_gib (GDDR with ECC on)
    # The node's CPU architecture where the GPU fixes it (kubelet's kubernetes.io/arch value): a Grace superchip (GH200,
    # GB200) shares its board with an Arm Neoverse V2 Grace CPU, so its node is arm64. None: any, the image decides.
    host_arch: str | None = None
    # GPUs a Kubernetes node of this GPU holds: 8 on an HGX/DGX baseboard; 4 in a GB200 NVL72 compute tray (two GB200
    # superchips of two GPUs each; 18 trays make the rack's 72).
    gpus_per_node: int = 8
    # GPUs one NVLink fabric joins (TP within it all-reduces over NVLink): an HGX/DGX board's 8; a GB200 NVL72 rack's 72,
    # whose NVLink switch trays join its 18 compute trays (AIConfigurator 0.12.0 systems/gb200.yaml: num_gpus_per_rack 72,
    # inter_node_bw 900 GB/s "NVLink via NVSwitch within rack"). Unused where the GPU has no NVLink.
    nvlink_domain: int = 8

    @property
    def usable_memory_gib(self) -> float | None:
        """The memory the runtime can allocate from: the device's own figure where known, else the datasheet's."""
        return self.device_memory_gib or self.memory_gib

    @property
    def is_cpu(self) -> bool:
        return self.runtime == "reference"

    @property
    def cc(self) -> float:
        """Compute capability as a number (the CPU runs every format as simulated quantization)."""
        return float(self.compute_capability) if self.compute_capability else 99.0

    @property
    def sm(self) -> int | None:
        if not self.compute_capability:
            return None
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)

    @property
    def weight_precisions(self) -> list[str]:
        return [f.name for f in QUANT_FORMATS.values() if self.can_run(f)]

    @property
    def kv_precisions(self) -> list[str]:
        return [f.name for f in KV_CACHE_FORMATS.values() if self.can_run_kv(f)]

    def summary(self) -> dict:
        """What a build plan and its manifest record of the GPU it was made for."""
        return {"key": self.key, "compute_capability": self.compute_capability, "architecture": self.architecture,
                "product_label": self.product_label, "memory_gib": self.memory_gib}

    def can_run(self, fmt: QuantFormat) -> bool:
        return self.cc >= fmt.min_compute_capability

    def can_run_kv(self, fmt: KvCacheFormat) -> bool:
        return self.cc >= fmt.min_compute_capability


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, GpuSpec]:
    raw = json.loads(resources.files("pipeline.data").joinpath("gpus.json").read_text(encoding="utf-8"))
    return {row["key"]: GpuSpec(**row) for row in raw["gpus"]}


def get_gpu(key: str) -> GpuSpec:
    table = gpu_table()
    normalized = ALIASES.get(key.strip().lower(), key.strip().lower())
    if normalized not in table:
        raise InvalidInputError(
            f"Unknown GPU {key!r}.",
            hint=f"Valid GPU keys: {', '.join(table)} (aliases: {', '.join(f'{a}={b}' for a, b in ALIASES.items())}).",
        )
    return table[normalized]


def check_one_cpu_process(tp: int, pp: int) -> None:
    """The reference runtime (`--gpu cpu`) runs in one process: refuse a tensor or pipeline split of it."""
    if tp * pp > 1:
        raise UnsupportedError("The reference runtime runs on one CPU process: tp and pp must be 1.",
                               hint="Drop --tp and --pp for --gpu cpu.")


def check_precision(gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat) -> None:
    """Refuse a weight or KV precision the GPU cannot run, naming what would work instead."""
    if not gpu.can_run(quant):
        raise UnsupportedError(
            f"{gpu.key} (SM {gpu.compute_capability}) cannot run {quant.name}: it needs compute "
            f"capability {quant.min_compute_capability} or newer.",
            hint=f"On {gpu.key} use one of: {', '.join(gpu.weight_precisions)}; "
            f"or pick a GPU that runs {quant.name}: {', '.join(k for k, g in gpu_table().items() if not g.is_cpu and g.can_run(quant))}.",
        )
    if not gpu.can_run_kv(kv):
        raise UnsupportedError(
            f"{gpu.key} (SM {gpu.compute_capability}) cannot run a {kv.name} KV cache: it needs compute "
            f"capability {kv.min_compute_capability} or newer.",
            hint=f"On {gpu.key} use --kv-cache {' or '.join(gpu.kv_precisions)}.",
        )


# --quant / --kv-cache name -> column of TensorRT-LLM 1.1.0's hardware support matrix (pipeline/data/trtllm_quant_hardware.tsv)
MATRIX_COLUMNS = {"fp8": "fp8", "nvfp4": "nvfp4", "int4_awq": "w4a16_awq", "w4a8_awq": "w4a8_awq"}
MATRIX_KV_COLUMNS = {"fp8": "fp8_kv"}


@lru_cache(maxsize=1)
def quant_hardware_matrix() -> dict[int, dict[str, str]]:
    """SM -> the matrix row of its architecture (the row's own columns, architecture among them)."""
    return {int(sm): row for row in packaged_fact_rows("trtllm_quant_hardware.tsv") for sm in row["sm"].split("|")}


def pytorch_supports(gpu: GpuSpec, column: str) -> bool:
    """Whether 1.1.0's matrix marks the format supported on the GPU's architecture (a GPU the matrix does not name:
    only the compute-capability rule of check_precision applies)."""
    row = quant_hardware_matrix().get(gpu.sm) if gpu.sm is not None else None
    return row is None or row[column] == "Y"


def pytorch_restriction(gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat) -> str | None:
    """What TensorRT-LLM 1.1.0's PyTorch backend does not support on this GPU although its compute capability
    allows it (the hardware support matrix), or None."""
    for name, column, what in ((quant.name, MATRIX_COLUMNS.get(quant.name), f"{quant.name} weights"),
                               (kv.name, MATRIX_KV_COLUMNS.get(kv.name), f"a {kv.name} KV cache")):
        if column and not gpu.is_cpu and not pytorch_supports(gpu, column):
            row = quant_hardware_matrix()[gpu.sm]
            return (f"TensorRT-LLM 1.1.0 does not support {what} on {row['architecture']} ({gpu.key}, SM "
                    f"{gpu.compute_capability}): its quantization hardware support matrix marks {column} unsupported there")
    return None


def check_pytorch_precision(gpu: GpuSpec, quant: QuantFormat, kv: KvCacheFormat) -> None:
    """check_precision, then refuse what 1.1.0's PyTorch backend does not support on the GPU's architecture, naming
    the precisions that run there and the GPUs that run the one asked for."""
    from pipeline.core.deployable import HF_QUANT_FORMATS

    check_precision(gpu, quant, kv)
    reason = pytorch_restriction(gpu, quant, kv)
    if reason is None:
        return
    here = [name for name in HF_QUANT_FORMATS if gpu.can_run(QUANT_FORMATS[name])
            and pytorch_restriction(gpu, QUANT_FORMATS[name], kv) is None]
    elsewhere = [key for key, other in gpu_table().items() if not other.is_cpu and other.can_run(quant)
                 and other.can_run_kv(kv) and pytorch_restriction(other, quant, kv) is None]
    raise UnsupportedError(reason + ".", hint=f"On {gpu.key} the PyTorch backend runs: {', '.join(here)}"
                           + (f"; {quant.name} runs on: {', '.join(elsewhere)}." if elsewhere else "."))

"""The checks of a rendered TensorRT-engine repository, run by pipeline.render in its temporary folder
before anything is renamed into place (a failure is InvalidInputError, exit 2, and nothing is written):

  - each config.pbtxt parses into Triton's own ModelConfig protobuf;
  - no `${`, `{{` or `{%` survives anywhere in the repository;
  - every ensemble step maps only tensors its model declares, and every tensor it reads is produced;
  - the tensorrt_llm model's tensors and parameter keys match the pinned release's reference tables
    (pipeline/data/reference/, copied from shared/reference/; $PIPELINE_REFERENCE_DIR overrides them);
    missing tables are an error, never a skipped check.

The bundle's path check (every path under the model root and in the bundle) is pipeline.render.bundle's.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.render.model_repo import LEFTOVER_MARKERS, package_folder, parse_model_config, tensor_signature
from pipeline.render.spec import MODELS

# tensorrt_llm parameter keys of the pinned release that are rendered only when set (the backend
# treats a missing key as unset): multi-GPU placement, encoder-decoder, LoRA, speculative decoding,
# sliding windows, guided decoding.
UNSET_PARAMETER_KEYS = (
    "encoder_model_path", "max_tokens_in_paged_kv_cache", "max_attention_window_size", "sink_token_length",
    "cross_kv_cache_fraction", "gpu_device_ids", "participant_ids", "lora_cache_optimal_adapter_size",
    "lora_cache_max_adapter_size", "lora_cache_gpu_memory_fraction", "lora_cache_host_memory_bytes",
    "lora_prefetch_dir", "decoding_mode", "lookahead_window_size", "lookahead_ngram_size",
    "lookahead_verification_set_size", "medusa_choices", "eagle_choices",
)
REFERENCE_TABLES = ("triton_trtllm_model_io.tsv", "triton_trtllm_parameters.tsv", "triton_trtllm_required_parameters.tsv")


def reference_tables_dir() -> Path:
    """$PIPELINE_REFERENCE_DIR, else the tables shipped in the package (pipeline/data/reference/).
    Every table of REFERENCE_TABLES must be there: a check without its facts is an error, not a skip."""
    override = os.environ.get("PIPELINE_REFERENCE_DIR")
    path = Path(override) if override else package_folder("pipeline.data", "contract tables", "PIPELINE_REFERENCE_DIR") / "reference"
    missing = [name for name in REFERENCE_TABLES if not (path / name).is_file()]
    if missing:
        raise StageFailedError(f"The contract tables render checks against are missing from {path}: {', '.join(missing)}.",
                               hint="Reinstall the pipeline (they ship in pipeline/data/reference/), or point "
                               "PIPELINE_REFERENCE_DIR at a folder with them (the project's shared/reference/).")
    return path


def check_repository(repo: Path) -> dict[str, str]:
    """Run every check on a rendered repository; raise InvalidInputError (exit 2) naming the first problems."""
    problems: list[str] = []
    checks: dict[str, str] = {}
    configs = {}
    for model in MODELS:
        path = repo / model / "config.pbtxt"
        if not path.is_file():
            problems.append(f"{model}/config.pbtxt is missing")
            continue
        configs[model] = parse_model_config(path)
        if configs[model].name != model:
            problems.append(f"{model}/config.pbtxt names the model {configs[model].name!r}")
    checks["protobuf"] = f"{len(configs)} config.pbtxt parse into ModelConfig"
    leftovers = [
        f"{path.relative_to(repo)}: {marker}"
        for path in sorted(repo.rglob("*")) if path.is_file() and path.suffix in (".pbtxt", ".py", ".json")
        for marker in LEFTOVER_MARKERS if marker in path.read_text(encoding="utf-8", errors="replace")
    ]
    problems += [f"unrendered template text in {item}" for item in leftovers]
    checks["placeholders"] = "no ${, {{ or {% left"
    if "ensemble" in configs:
        problems += ensemble_problems(configs)
        checks["ensemble"] = "every step maps declared tensors; every read tensor is produced"
    tables = reference_tables_dir()
    if "tensorrt_llm" in configs:
        problems += contract_problems(configs["tensorrt_llm"], tables)
    checks["contract"] = f"tensorrt_llm tensors and parameter keys match {tables}"
    if problems:  # exit 2: what the templates would write is a repository NVIDIA's runtime rejects
        raise InvalidInputError("The rendered repository failed its checks:\n  " + "\n  ".join(problems[:20]),
                                hint="Fix the templates (model_repo_templates/, or PIPELINE_TEMPLATES_DIR); nothing was "
                                "written to the output folder.")
    return checks


def ensemble_problems(configs: dict) -> list[str]:
    ensemble = configs["ensemble"]
    available = {t.name for t in ensemble.input}
    produced: set[str] = set()
    problems = []
    for step in ensemble.ensemble_scheduling.step:
        model = configs.get(step.model_name)
        if model is None:
            problems.append(f"ensemble step calls unknown model {step.model_name!r}")
            continue
        inputs, outputs = {t.name for t in model.input}, {t.name for t in model.output}
        for key, value in step.input_map.items():
            if key not in inputs:
                problems.append(f"ensemble step {step.model_name}: input_map key {key!r} is not an input of the model")
            if value not in available and value not in produced:
                problems.append(f"ensemble step {step.model_name}: reads {value!r}, which nothing before it produces")
        for key, value in step.output_map.items():
            if key not in outputs:
                problems.append(f"ensemble step {step.model_name}: output_map key {key!r} is not an output of the model")
            produced.add(value)
        required = {t.name for t in model.input if not t.optional}
        missing = required - set(step.input_map.keys())
        if missing:
            problems.append(f"ensemble step {step.model_name}: required inputs {sorted(missing)} are not mapped")
    for output in ensemble.output:
        if output.name not in produced:
            problems.append(f"ensemble output {output.name!r} is produced by no step")
    return problems


def read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def contract_problems(config, tables: Path, model: str = "tensorrt_llm") -> list[str]:
    """Differences between a rendered model's tensors/parameter keys and the reference tables."""
    problems = []
    rows = [r for r in read_tsv(tables / "triton_trtllm_model_io.tsv") if r["model"] == model]
    for direction, tensors in (("input", config.input), ("output", config.output)):
        expected = {r["name"]: r for r in rows if r["direction"] == direction}
        actual = {t.name: tensor_signature(t, direction == "input") for t in tensors}
        for name in sorted(set(expected) - set(actual)):
            problems.append(f"{model} {direction} {name!r} of the reference contract is missing")
        for name in sorted(set(actual) - set(expected)):
            problems.append(f"{model} {direction} {name!r} is not in the reference contract")
        for name in sorted(set(actual) & set(expected)):
            want, have = expected[name], actual[name]
            for field in ("data_type", "dims", "optional", "allow_ragged_batch", "reshape"):
                wanted = want[field]
                if field == "data_type" and wanted.startswith("${"):
                    continue  # a placeholder in the upstream template: any concrete type
                if field == "data_type" and name == "lora_weights":
                    continue  # the engine's dtype, as NVIDIA's LoRA docs tell a bf16 deployment to set it (context.py)
                if field == "dims":
                    wanted = "[" + ", ".join(p.strip() for p in wanted.strip("[]").split(",") if p.strip()) + "]"
                if have[field] != wanted:
                    problems.append(f"{model} {direction} {name!r}: {field} is {have[field]!r}, the reference says {wanted!r}")
    keys = {r["parameter_key"] for r in read_tsv(tables / "triton_trtllm_parameters.tsv")
            if r["model"] == model and r["kind"] == "parameter"}
    rendered = set(config.parameters.keys())
    for key in sorted(rendered - keys):
        problems.append(f"{model} parameter {key!r} is not a parameter of the pinned release")
    for key in sorted(keys - rendered - set(UNSET_PARAMETER_KEYS)):
        problems.append(f"{model} parameter {key!r} of the pinned release is neither rendered nor listed as unset")
    required = tables / "triton_trtllm_required_parameters.tsv"
    if not required.is_file():
        problems.append(f"{required} is missing: cannot check the parameters the backend reads without a default")
        return problems
    for row in read_tsv(required):
        if row["model"] == model and row["parameter_key"] not in rendered:
            problems.append(f"{model} parameter {row['parameter_key']!r} is missing: the backend reads it without a "
                            f"default ({row['read_at'].split(' ')[0]}), so the model would not load")
    return problems


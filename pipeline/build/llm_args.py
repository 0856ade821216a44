"""The LLM-API option keys of TensorRT-LLM 1.1.0 (PyTorch backend), and the check every options file
we write goes through.

The facts live in `pipeline/data/trtllm_llm_args.tsv`: the pydantic fields of `TorchLlmArgs` and its
base `BaseLlmArgs`, and of the nested `KvCacheConfig` and `CudaGraphConfig`, read from
tensorrt_llm/llmapi/llm_args.py at v1.1.0 (48b7b5d8; the table's header says how it was read).
TensorRT-LLM's own models forbid extra fields (`StrictBaseModel`, extra="forbid"), so an unknown key
fails there at load time, on the GPU; `check_options` refuses it here, before anything is written,
naming the key and the nearest valid ones.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict

from pipeline.data import fact_rows
from pipeline.core.errors import InvalidInputError

FACTS = "trtllm_llm_args.tsv"
DECODING_TYPES = "trtllm_decoding_types.tsv"  # speculative_config's decoding_type -> option class (from_dict's map)
SPECULATIVE_BASE = "DecodingBaseConfig"
TOP_LEVEL_CLASSES = ("BaseLlmArgs", "TorchLlmArgs")  # TorchLlmArgs overrides (load_format) come last


class FieldFact(BaseModel):
    """One row of the table: a field of one LLM-API class."""

    model_config = ConfigDict(frozen=True)

    cls: str
    field: str
    type: str
    default: str
    commit: str
    source: str


@lru_cache(maxsize=None)
def load_facts() -> tuple[FieldFact, ...]:
    text = resources.files("pipeline.data").joinpath(FACTS).read_text(encoding="utf-8")
    return tuple(FieldFact(cls=row["class"], field=row["field"], type=row["type"], default=row["default"],
                           commit=row["commit"], source=row["source"])
                 for row in fact_rows(text))


def source_commit() -> str:
    """The TensorRT-LLM commit the table was read at."""
    commits = {fact.commit for fact in load_facts() if fact.cls != "LoraConfig"}  # lora_helper.py's own commit
    if len(commits) != 1:
        raise RuntimeError(f"{FACTS} mixes commits: {sorted(commits)}")
    return commits.pop()


@lru_cache(maxsize=None)
def decoding_types() -> dict[str, str]:
    """DecodingBaseConfig.from_dict's map at 1.1.0: the `decoding_type` a YAML gives -> the class it builds."""
    text = resources.files("pipeline.data").joinpath(DECODING_TYPES).read_text(encoding="utf-8")
    return {row["decoding_type"]: row["class"] for row in fact_rows(text)}


def speculative_fields(decoding_type: Any) -> tuple[str, dict[str, FieldFact]] | None:
    """The class a speculative_config's decoding_type selects and its fields (DecodingBaseConfig's with its own);
    None for a decoding_type from_dict rejects."""
    cls = decoding_types().get(decoding_type) if isinstance(decoding_type, str) else None
    if cls is None:
        return None
    return cls, {**class_fields(SPECULATIVE_BASE), **class_fields(cls)}


def class_fields(cls: str) -> dict[str, FieldFact]:
    return {fact.field: fact for fact in load_facts() if fact.cls == cls}


def top_level_fields() -> dict[str, FieldFact]:
    """TorchLlmArgs' fields: its own and those it inherits from BaseLlmArgs."""
    fields: dict[str, FieldFact] = {}
    for cls in TOP_LEVEL_CLASSES:
        fields.update(class_fields(cls))
    return fields


def nested_class(fact: FieldFact) -> str | None:
    """The option class a field holds (KvCacheConfig for kv_cache_config), when the table has it."""
    known = {f.cls for f in load_facts()} - set(TOP_LEVEL_CLASSES)
    names = set(re.findall(r"[A-Za-z_]\w*", fact.type))
    found = sorted(names & known)
    return found[0] if found else None


def _nearest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    return ", ".join(close) if close else "none close"


def _type_ok(value: Any, type_text: str) -> bool:
    """Whether a YAML value fits a field's declared type (simple types only; anything else passes)."""
    text = type_text.strip()
    optional = re.fullmatch(r"Optional\[(.*)\]", text)
    if optional:
        return value is None or _type_ok(value, optional.group(1))
    literal = re.fullmatch(r"Literal\[(.*)\]", text)
    if literal:
        return value in [part.strip().strip("'\"") for part in literal.group(1).split(",")]
    if text == "bool":
        return isinstance(value, bool)
    if text == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if text == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if text == "str":
        return isinstance(value, str)
    if text == "List[int]":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if text == "dict":
        return isinstance(value, dict)
    return True


def option_problems(options: Mapping[str, Any]) -> list[str]:
    """Every key LlmArgs lacks and every value of the wrong type, top level and nested."""
    problems: list[str] = []

    def visit(values: Mapping[str, Any], fields: dict[str, FieldFact], where: str, cls: str) -> None:
        for key, value in values.items():
            fact = fields.get(key)
            if fact is None:
                problems.append(f"{where}{key}: not a field of {cls} in TensorRT-LLM 1.1.0 "
                                f"(nearest valid: {_nearest(str(key), sorted(fields))})")
                continue
            inner = nested_class(fact)
            if key == "speculative_config" and isinstance(value, Mapping) and not where:
                speculative(value)
            elif isinstance(value, Mapping):
                if inner is None:
                    problems.append(f"{where}{key}: {fact.type} has no field table here, so its keys cannot be checked")
                else:
                    visit(value, class_fields(inner), f"{where}{key}.", inner)
            elif inner is None and not _type_ok(value, fact.type):
                problems.append(f"{where}{key}: {value!r} is not a {fact.type}")
            elif inner is not None and value is not None:
                problems.append(f"{where}{key}: {value!r} is not a {inner} mapping")

    def speculative(value: Mapping[str, Any]) -> None:
        """from_dict pops decoding_type, then the chosen class (extra="forbid") takes the rest."""
        chosen = speculative_fields(value.get("decoding_type"))
        if chosen is None:
            problems.append(f"speculative_config.decoding_type: {value.get('decoding_type')!r} is not a key of "
                            f"DecodingBaseConfig.from_dict in TensorRT-LLM 1.1.0 (valid: {', '.join(decoding_types())})")
            return
        cls, fields = chosen
        visit({k: v for k, v in value.items() if k != "decoding_type"}, fields, "speculative_config.", cls)

    visit(options, top_level_fields(), "", "TorchLlmArgs")
    return problems


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse (exit 2) options TensorRT-LLM 1.1.0's TorchLlmArgs would reject."""
    problems = option_problems(options)
    if problems:
        raise InvalidInputError(
            "LLM-API options TensorRT-LLM 1.1.0 does not accept: " + "; ".join(problems) + ".",
            hint=f"Use the keys of TorchLlmArgs / KvCacheConfig / CudaGraphConfig (pipeline/data/{FACTS}, read at "
            f"TensorRT-LLM {source_commit()}).",
        )

"""A TensorRT-LLM checkpoint config.json checked against what TensorRT-LLM's model classes read.

The facts live in `pipeline/data/trtllm_checkpoint_keys.tsv` (read from NVIDIA/TensorRT-LLM, commit
and symbol named per row): for each architecture, the keys its config class and model read, whether
a missing key fails the build or silently falls back to a default, the values the class accepts, and
which Hugging Face config key `from_hugging_face` takes the value from.

`complete_checkpoint_config` sets what ModelOpt's export leaves out or gets wrong when TensorRT-LLM
is not installed (qwen_type, GPT-2's learned position embedding) or when its `from_hugging_face`
reads a transformers 5 config (rotary_base falls back to 10000, rotary_scaling becomes
`{"rope_type": "default"}`, which `RotaryScalingType.from_string` rejects). `check_checkpoint_config`
then refuses, naming the key, any config the model class would reject or misread.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.data import fact_rows
from pipeline.core.errors import InvalidInputError
from pipeline.hf.compat import RopeSettings, rope_settings

FACTS = Path(__file__).resolve().parent.parent / "data" / "trtllm_checkpoint_keys.tsv"
ANY_ARCHITECTURE = "*"

# Keys that decide tensor shapes: a mismatch with the HF config means the weights do not fit, so it
# is refused rather than rewritten. Every other key with an HF source is set from the HF config.
SHAPE_KEYS = frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                        "intermediate_size", "head_size", "vocab_size"})

MISSING = object()


class KeyRule(BaseModel):
    """One row of the facts table."""

    model_config = ConfigDict(frozen=True)

    architecture: str
    key: str
    if_absent: str  # "error" or "default"
    upstream_default: str
    allowed: tuple[str, ...]
    hf_source: str
    source: str


@lru_cache(maxsize=None)
def load_rules(path: Path = FACTS) -> tuple[KeyRule, ...]:
    rows = fact_rows(path.read_text(encoding="utf-8"))
    return tuple(
        KeyRule(architecture=row["architecture"], key=row["key"], if_absent=row["if_absent"],
                upstream_default=row["upstream_default"], allowed=tuple(v for v in row["allowed"].split("|") if v),
                hf_source=row["hf_source"], source=row["source"])
        for row in rows
    )


def architectures() -> tuple[str, ...]:
    """Architectures the table has rules of their own for."""
    return tuple(dict.fromkeys(r.architecture for r in load_rules() if r.architecture != ANY_ARCHITECTURE))


def rules_for(architecture: str) -> list[KeyRule]:
    """The rules for one architecture: its own rows, plus the PretrainedConfig rows it does not override."""
    own = [r for r in load_rules() if r.architecture == architecture]
    keys = {r.key for r in own}
    return [r for r in load_rules() if r.architecture == ANY_ARCHITECTURE and r.key not in keys] + own


def lookup(data: Any, dotted: str) -> Any:
    """data["a"]["b"] for "a.b" (a list index for a digit part), or MISSING."""
    for part in dotted.split("."):
        if isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return MISSING
    return data


def hf_value(rule: KeyRule, hf_config: dict[str, Any], rope: RopeSettings) -> Any:
    """The value from_hugging_face would give rule.key for this HF config, or MISSING.

    RoPE keys are read through `rope_settings`, so transformers 4.x and 5.x spellings give the same value."""
    if not rule.hf_source:
        return MISSING
    if rule.hf_source.startswith("="):
        text = rule.hf_source[1:]
        try:
            return json.loads(text)
        except ValueError:
            return text
    for name in rule.hf_source.split("|"):
        if name == "rope_theta":
            value = MISSING if rope.theta is None else rope.theta
        elif name == "rope_scaling":
            value = rope.scaling
        elif name in ("rope_scaling.rope_type", "rope_scaling.type"):
            value = MISSING if rope.scaling is None else rope.scaling_type
        else:
            value = lookup(hf_config, name)
        if value is not MISSING and (value is not None or name == "rope_scaling"):
            return value
    return MISSING


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=0.0)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _default_of(rule: KeyRule) -> Any:
    """upstream_default as a value when it is a literal (True, 1e-05, None, rope_gpt_neox), else MISSING."""
    text = rule.upstream_default
    literals = {"True": True, "False": False, "None": None}
    if text in literals:
        return literals[text]
    try:
        return float(text)
    except ValueError:
        return text if text.isidentifier() else MISSING


def _canonical(key: str, value: Any) -> Any:
    """rotary_scaling with `type` and `rope_type` both set (TensorRT-LLM reads either), else value."""
    if key == "rotary_scaling" and isinstance(value, dict):
        kind = value.get("type", value.get("rope_type"))
        return {**{k: v for k, v in value.items() if k != "rope_theta"}, "type": kind, "rope_type": kind}
    return value


def _shown(value: Any) -> str:
    return "absent" if value is MISSING else json.dumps(value)


def preflight(architecture: str, hf_config: dict[str, Any], rope: Optional[RopeSettings] = None) -> None:
    """Refuse, before any work, an HF config whose values the architecture's TensorRT-LLM class rejects
    (an unknown qwen_type, a RoPE scaling type TensorRT-LLM has no kernel for)."""
    rope = rope if rope is not None else rope_settings(hf_config)
    for rule in rules_for(architecture):
        value = hf_value(rule, hf_config, rope)
        if value is MISSING or value is None or not rule.allowed or "." in rule.key:
            continue
        if str(value) not in rule.allowed:
            raise _refusal(architecture, rule, value)
    if rope.scaling is not None:
        for rule in rules_for(architecture):
            if rule.key.startswith("rotary_scaling.") and rope.scaling_type not in rule.allowed:
                raise _refusal(architecture, rule, rope.scaling_type, hf_key="rope_scaling.rope_type")


def _refusal(architecture: str, rule: KeyRule, value: Any, hf_key: Optional[str] = None) -> InvalidInputError:
    origin = f" (from the HF config's {hf_key or rule.hf_source})" if (hf_key or rule.hf_source) else ""
    return InvalidInputError(
        f"TensorRT-LLM's {architecture} would reject checkpoint key {rule.key} = {json.dumps(value)}{origin}: "
        f"it accepts only {', '.join(rule.allowed)} ({rule.source}).",
        hint="This model cannot be built with TensorRT-LLM 1.1 as it is; use a checkpoint of a supported variant.",
    )


def complete_checkpoint_config(config: dict[str, Any], hf_config: dict[str, Any], rope: Optional[RopeSettings] = None) -> list[str]:
    """Set, in place, every key the architecture's class reads whose value the HF config decides and the
    export left out or got wrong; returns one line per change. Shape keys are never rewritten (see
    check_checkpoint_config)."""
    architecture = config.get("architecture")
    if not isinstance(architecture, str):
        return []
    rope = rope if rope is not None else rope_settings(hf_config)
    changes: list[str] = []
    for rule in rules_for(architecture):
        if "." in rule.key or rule.key in SHAPE_KEYS:
            continue
        wanted = hf_value(rule, hf_config, rope)
        if wanted is MISSING:
            continue
        current = config.get(rule.key, MISSING)
        if current is not MISSING and _same(current, wanted):
            continue
        if wanted is None and current is MISSING:
            continue
        config[rule.key] = wanted
        changes.append(f"{rule.key}: {_shown(current)} -> {_shown(wanted)}")
    return changes


def check_checkpoint_config(config: dict[str, Any], hf_config: Optional[dict[str, Any]] = None,
                            rope: Optional[RopeSettings] = None) -> None:
    """Raise InvalidInputError naming the first key TensorRT-LLM's model class would reject, need, or
    read differently from the HF config it was converted from (when hf_config is given)."""
    architecture = config.get("architecture")
    arch_rule = next(r for r in rules_for(ANY_ARCHITECTURE) if r.key == "architecture")
    if not isinstance(architecture, str) or architecture not in arch_rule.allowed:
        raise InvalidInputError(
            f"Checkpoint key architecture = {json.dumps(architecture)} is not a TensorRT-LLM model "
            f"(MODEL_MAP has no such entry; {arch_rule.source}).",
            hint="Convert a supported architecture (see `pipeline convert --help`).",
        )
    if hf_config is not None and rope is None:
        rope = rope_settings(hf_config)
    for rule in rules_for(architecture):
        parent, _, child = rule.key.partition(".")
        holder: Any = config
        names = [rule.key]
        if child:
            holder = config.get(parent)
            if holder is None:
                continue
            if not isinstance(holder, dict):
                raise InvalidInputError(f"Checkpoint key {parent} of {architecture} is {json.dumps(holder)}, not an object.",
                                        hint=f"TensorRT-LLM reads {rule.key} from it ({rule.source}).")
            names = child.split("|")
        value = next((holder[name] for name in names if name in holder), MISSING)
        if value is MISSING:
            if rule.if_absent == "error":
                raise InvalidInputError(
                    f"Checkpoint config of {architecture} lacks {rule.key}, which TensorRT-LLM reads without a default "
                    f"({rule.source}): trtllm-build would fail.",
                    hint="This is a convert defect; re-run with --force after upgrading the pipeline.",
                )
        elif rule.allowed and str(value) not in rule.allowed:
            raise InvalidInputError(
                f"Checkpoint key {rule.key} of {architecture} is {json.dumps(value)}; TensorRT-LLM accepts only "
                f"{', '.join(rule.allowed)} ({rule.source}).",
                hint="Convert a checkpoint whose HF config TensorRT-LLM 1.1 supports.",
            )
        if hf_config is None or child:
            continue
        wanted = hf_value(rule, hf_config, rope or RopeSettings())
        if wanted is MISSING or (value is MISSING and wanted is None):
            continue
        if value is MISSING and _same(_default_of(rule), wanted):
            continue
        if value is MISSING or not _same(_canonical(rule.key, value), _canonical(rule.key, wanted)):
            default = f" (TensorRT-LLM then uses {rule.upstream_default})" if value is MISSING and rule.upstream_default else ""
            raise InvalidInputError(
                f"Checkpoint key {rule.key} of {architecture} is {_shown(value)}{default}, but the HF config's "
                f"{rule.hf_source} says {json.dumps(wanted)}: TensorRT-LLM would build a different model ({rule.source}).",
                hint="The export and the HF config disagree; re-run with --force, and report it if it persists.",
            )

"""Hugging Face folders that both transformers generations read the same way.

The pipeline writes `build/<model>/hf/` with transformers 5, but TensorRT-LLM 1.1.0's image runs
transformers 4.57.1 (its requirements.txt pins it; see README "Two transformers generations"), and
its Triton preprocessing/postprocessing models load our tokenizer files under that version. The two
generations disagree on two files:

- config.json: transformers 5 keeps the RoPE base and scaling in `rope_parameters`
  (`{"rope_theta": ..., "rope_type": ...}`); 4.57.1 reads top-level `rope_theta` / `rope_scaling`,
  ignores `rope_parameters` and falls back to rope_theta 10000 (SmolLM2's 100000 and Llama 3.x's
  500000 + llama3 scaling are lost). Configs converted from GGUF also lack `architectures`, which
  TensorRT-LLM's `from_hugging_face` reads (`hf_config.architectures[0]`).
- tokenizer_config.json: transformers 5 names the generic class `TokenizersBackend`, which 4.57.1
  does not have (AutoTokenizer raises). `PreTrainedTokenizerFast` is the same tokenizer.json-backed
  tokenizer in 4.57.1, and transformers 5 maps that name back to `TokenizersBackend`.

`make_folder_compatible` writes the 4.x keys beside the 5.x ones (same values) and is run by
`pipeline download` on every folder it writes. `rope_settings` reads either spelling and refuses a
config whose two spellings disagree, since each generation would then use a different RoPE.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError

# Bump when what make_folder_compatible writes changes, so downloaded folders are made again.
HF_COMPAT_VERSION = 1

# transformers 5's generic tokenizers-backed class -> the class transformers 4.57.1 has for it.
TOKENIZER_CLASS_FOR_4X = {"TokenizersBackend": "PreTrainedTokenizerFast"}

_DEFAULT_ROPE_TYPES = ("default", None)


class RopeSettings(BaseModel):
    """RoPE as the checkpoint defines it: base, and scaling (None for plain RoPE).

    `scaling` holds the HF scaling keys without `rope_theta`, with both `rope_type` (transformers)
    and `type` (what TensorRT-LLM's Attention reads first) set to the same name."""

    model_config = ConfigDict(frozen=True)

    theta: Optional[float] = None
    scaling: Optional[dict[str, Any]] = None

    @property
    def scaling_type(self) -> Optional[str]:
        return None if self.scaling is None else self.scaling.get("type")


def _normalise_scaling(raw: Any, where: str) -> Optional[dict[str, Any]]:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidInputError(f"config.json: {where} is {raw!r}, not an object.",
                                hint="Fix the checkpoint's config.json (rope_scaling is an object or null).")
    scaling = {k: v for k, v in raw.items() if k != "rope_theta"}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in _DEFAULT_ROPE_TYPES:
        return None
    other = scaling.get("type", kind)
    if other != kind:
        raise InvalidInputError(f"config.json: {where} says rope_type {kind!r} but type {other!r}.",
                                hint="Keep one RoPE scaling type in config.json.")
    return {**scaling, "rope_type": kind, "type": kind}


def rope_settings(config: dict[str, Any]) -> RopeSettings:
    """RoPE base and scaling from an HF config dict written by either generation.

    Raises InvalidInputError when `rope_theta`/`rope_scaling` and `rope_parameters` both exist and
    disagree: transformers 4.57.1 would use the first, transformers 5 the second."""
    params = config.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise InvalidInputError(f"config.json: rope_parameters is {params!r}, not an object.",
                                hint="Fix the checkpoint's config.json.")
    top_theta = config.get("rope_theta")
    param_theta = (params or {}).get("rope_theta")
    if top_theta is not None and param_theta is not None and float(top_theta) != float(param_theta):
        raise InvalidInputError(
            f"config.json has rope_theta {top_theta} but rope_parameters.rope_theta {param_theta}: transformers 4.x "
            "reads the first and transformers 5 the second, so the model would run with two different RoPE bases.",
            hint="Keep one value in both keys (the one the model was trained with).",
        )
    theta = param_theta if param_theta is not None else top_theta
    from_params = _normalise_scaling(params, "rope_parameters") if params is not None else None
    from_top = _normalise_scaling(config.get("rope_scaling"), "rope_scaling")
    if params is not None and "rope_scaling" in config and from_params != from_top:
        raise InvalidInputError(
            f"config.json has rope_scaling {config.get('rope_scaling')!r} but rope_parameters {params!r}: "
            "transformers 4.x reads the first and transformers 5 the second.",
            hint="Keep the same RoPE scaling in both keys.",
        )
    return RopeSettings(theta=None if theta is None else float(theta), scaling=from_params if params is not None else from_top)


def resolved_rope(folder: Path, config: dict[str, Any]) -> RopeSettings:
    """rope_settings of config.json, with the RoPE base transformers itself would use when the file
    names none (the model class's default, e.g. 10000 for Llama and Qwen2)."""
    rope = rope_settings(config)
    if rope.theta is not None or not isinstance(config.get("model_type"), str):
        return rope
    from transformers import AutoConfig

    try:
        loaded = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as error:
        raise InvalidInputError(f"transformers cannot read {folder / 'config.json'}: {error}",
                                hint="Check config.json (model_type and the model's keys).") from None
    params = getattr(loaded, "rope_parameters", None)
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return RopeSettings(theta=float(params["rope_theta"]), scaling=_normalise_scaling(params, "rope_parameters"))
    return rope


def causal_lm_class(model_type: Any) -> Optional[str]:
    """The transformers causal-LM class for a model_type (configs written from GGUF lack `architectures`)."""
    if not isinstance(model_type, str):
        return None
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)


def compatible_config(folder: Path, config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """config with the keys transformers 4.x reads added beside transformers 5's; (new config, changes)."""
    rope = resolved_rope(folder, config)
    out = dict(config)
    changes: list[str] = []
    if rope.theta is not None and out.get("rope_theta") is None:
        out["rope_theta"] = rope.theta
        changes.append(f"config.json: rope_theta {rope.theta:g} (from rope_parameters) for transformers 4.x")
    if rope.scaling is not None and out.get("rope_scaling") is None:
        out["rope_scaling"] = {k: v for k, v in rope.scaling.items() if k != "type"}
        changes.append(f"config.json: rope_scaling {rope.scaling['rope_type']} (from rope_parameters) for transformers 4.x")
    if not out.get("architectures"):
        arch = causal_lm_class(out.get("model_type"))
        if arch:
            out["architectures"] = [arch]
            changes.append(f"config.json: architectures [{arch}] (from model_type {out.get('model_type')})")
    return out, changes


def compatible_tokenizer_config(folder: Path, config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """tokenizer_config with a tokenizer_class transformers 4.57.1 has; (new config, changes)."""
    name = config.get("tokenizer_class")
    replacement = TOKENIZER_CLASS_FOR_4X.get(name) if isinstance(name, str) else None
    if replacement is None:
        return config, []
    if not (folder / "tokenizer.json").is_file():
        raise InvalidInputError(
            f"{folder / 'tokenizer_config.json'} names {name}, which needs tokenizer.json, and there is none.",
            hint="Save the tokenizer with save_pretrained so tokenizer.json is written.",
        )
    return {**config, "tokenizer_class": replacement}, [
        f"tokenizer_config.json: tokenizer_class {name} -> {replacement} (transformers 4.x has no {name})"]


def read_json_object(path: Path, *, hint: str) -> dict[str, Any]:
    """A JSON file holding an object, or InvalidInputError saying what is wrong with it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInputError(f"Cannot read {path}: {error}.", hint=hint) from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} is not a JSON object.", hint=hint)
    return data


def make_folder_compatible(folder: Path) -> list[str]:
    """Rewrite config.json and tokenizer_config.json in folder so transformers 4.57.1 and 5.x read
    them the same way; returns what changed (nothing when they already are)."""
    changes: list[str] = []
    for name, fix in (("config.json", compatible_config), ("tokenizer_config.json", compatible_tokenizer_config)):
        path = folder / name
        if not path.is_file():
            continue
        fixed, done = fix(folder, read_json_object(path, hint="Make it a valid JSON object."))
        if done:
            path.write_text(json.dumps(fixed, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            changes.extend(done)
    return changes

"""A draft model cut from its target: the same HF checkpoint with most decoder layers removed.

Speculative decoding needs a draft that shares the target's tokenizer and vocabulary. For the demo
(SmolLM2-135M-Instruct, 30 layers) no smaller sibling exists, so the draft is the demo itself with
layers removed: embeddings, final norm and LM head are the target's, so its guesses follow the
target's where the next token is easy (copies, punctuation, common continuations). `write_layer_draft`
keeps the decoder layers named in `layers` (renumbered from 0, in order) and writes a complete HF folder
(config.json with num_hidden_layers changed, model.safetensors, the tokenizer files, generation_config.json).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Sequence

from pipeline.core.artifacts import atomic_dir
from pipeline.core.errors import InvalidInputError
from pipeline.hf.tokenizer import tokenizer_files

_LAYER_KEY = re.compile(r"^(model\.layers\.)(\d+)(\..*)$")
# Of the demo's 30 layers, all but the six in the middle (12-17). Measured on the demo (README, "Speculative
# decoding"): keeping 6, 15 or 20 layers (first, last, every other one) or removing 8 middle ones made it babble
# (no draft token accepted); removing the middle 6 still answers coherently. A 135M model has little to cut.
DEMO_DRAFT_LAYERS = tuple(i for i in range(30) if not 12 <= i < 18)


def write_layer_draft(hf_dir: Path, out_dir: Path, layers: Sequence[int] = DEMO_DRAFT_LAYERS) -> Path:
    """Write the draft of `hf_dir` (only its decoder layers `layers`) to out_dir, atomically; returns out_dir."""
    from safetensors.torch import load_file, save_file

    hf_dir = Path(hf_dir)
    config_path = hf_dir / "config.json"
    if not config_path.is_file():
        raise InvalidInputError(f"{hf_dir} is not a Hugging Face checkpoint folder (no config.json).",
                                hint="Point at the folder `pipeline download` wrote (build/<model>/hf/).")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    total = int(config.get("num_hidden_layers") or 0)
    keep = sorted(set(int(i) for i in layers))
    if not keep or len(keep) >= total or keep[0] < 0 or keep[-1] >= total:
        raise InvalidInputError(f"A draft keeps some of the target's {total} layers (0 to {total - 1}), fewer than all: "
                                f"got {list(layers)}.", hint="Keep a few, e.g. the first two and the last two.")
    renumber = {old: new for new, old in enumerate(keep)}
    shards = sorted(hf_dir.glob("*.safetensors"))
    if not shards:
        raise InvalidInputError(f"{hf_dir} holds no *.safetensors weights.",
                                hint="Convert the checkpoint to safetensors first (`pipeline download` does).")
    kept = {}
    for shard in shards:
        for key, tensor in load_file(str(shard)).items():
            match = _LAYER_KEY.match(key)
            if match is None:
                kept[key] = tensor
            elif int(match.group(2)) in renumber:
                kept[f"{match.group(1)}{renumber[int(match.group(2))]}{match.group(3)}"] = tensor
    config["num_hidden_layers"] = len(keep)
    for key in ("layer_types",):  # per-layer lists some configs carry
        if isinstance(config.get(key), list):
            config[key] = [config[key][i] for i in keep]
    with atomic_dir(Path(out_dir)) as tmp:
        save_file({k: v.contiguous() for k, v in kept.items()}, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        for extra in [*tokenizer_files(hf_dir), hf_dir / "generation_config.json"]:
            if extra.is_file():
                shutil.copy2(extra, tmp / extra.name)
    return Path(out_dir)

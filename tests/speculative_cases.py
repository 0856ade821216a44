"""Reference folders built with speculation, for the speculative-decoding tests: the demo as target, its
layer-cut draft (pipeline.hf.draft) at <build>/draft, and the "speculative" record (issue #24's contract) in
config.json and manifest.json. spec-gpu's `pipeline build --speculative` writes the same layout."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.build.reference_folder import write_reference_engine_dir
from pipeline.hf.draft import write_layer_draft

BUILD = {"max_batch_size": 4, "max_input_len": 256, "max_seq_len": 512, "max_num_tokens": 2048}
PROMPTS = {  # chat, summarization (copies from the prompt), code
    "chat": "What is the capital of France? Answer briefly.",
    "summarization": "Summarize in one sentence: The Eiffel Tower is a wrought-iron lattice tower on the Champ de "
                     "Mars in Paris, France. It is named after the engineer Gustave Eiffel, whose company designed "
                     "and built the tower from 1887 to 1889.",
    "code": "Write a Python function that returns the sum of a list of numbers.",
}


def speculative_folder(hf_dir: Path, out: Path, record: dict) -> Path:
    """A reference engine folder of hf_dir at out with `record`; draft-target gets the demo's draft at out/draft."""
    engine = write_reference_engine_dir(hf_dir, out, BUILD)
    if record["method"] == "draft-target":
        draft_hf = write_layer_draft(hf_dir, out.parent / f"{out.name}-draft-hf")
        write_reference_engine_dir(draft_hf, engine / record.get("draft_dir", "draft"), BUILD)
    config = json.loads((engine / "config.json").read_text(encoding="utf-8"))
    config["build_config"]["speculative"] = record
    (engine / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (engine / "manifest.json").write_text(json.dumps({"speculative": record}), encoding="utf-8")
    return engine


def chat_ids(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return tokenizer(rendered)["input_ids"]

"""The config.json `pipeline plan` sizes a model from, before any weight is downloaded.

`--model` takes, in this order:
- an existing folder holding config.json, or a config file: as it is;
- a model whose shapes the package ships (`llama-3.1-405b`: every model a published table names);
- `hf:org/name[@revision]`: the Hub repository's config.json and, for a ModelOpt checkpoint, its hf_quant_config.json,
  and nothing else, through the shared HF cache (HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE and HF_ENDPOINT as for
  `pipeline download`); copied to build/<model>/ so the plan and its reports are named after the model, not the
  cache's commit folder.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core.artifacts import write_text_atomic
from pipeline.core.errors import InvalidInputError
from pipeline.core.paths import model_dir
from pipeline.download.hub import snapshot
from pipeline.hf.sources import REPO_ID, parse_source
from pipeline.planner.published import shipped_config, shipped_model_names

PLANNING_FILES = ("config.json", "hf_quant_config.json")  # what model_spec_from_config reads


def planning_config(model: str, flag: str = "--model") -> Path:
    """The folder or config file to plan `model` from (see the module docstring); a clear refusal, naming the option
    that gave it, otherwise."""
    text = model.strip()
    given = Path(text).expanduser()
    if text and given.exists():
        return given
    shipped = shipped_config(text)
    if shipped is not None:
        return shipped
    if text.startswith("hf:"):
        return _hub_config(text)
    hint = (f"For the Hugging Face Hub write hf:{text} (only its config.json is fetched). " if REPO_ID.match(text) else "")
    raise InvalidInputError(
        f"{flag} {model!r}: no such folder or file, and not a model whose shapes the planner ships.",
        hint=hint + "Give a model folder or its config.json, hf:org/name[@revision], or one of: "
        + ", ".join(shipped_model_names()) + ".")


def _hub_config(source: str) -> Path:
    parsed = parse_source(source)
    snapshot_folder = snapshot(parsed, force_download=False, only=list(PLANNING_FILES))
    if not (snapshot_folder / "config.json").is_file():
        raise InvalidInputError(f"{source} has no config.json at the top of the repository: nothing to size the model from.",
                                hint="Plan from the repository that holds the model's config.json (not an adapter or a dataset).")
    folder = model_dir(parsed.model)
    for name in PLANNING_FILES:
        fetched = snapshot_folder / name
        if fetched.is_file():
            write_text_atomic(folder / name, fetched.read_text(encoding="utf-8"))
        else:
            (folder / name).unlink(missing_ok=True)  # a sidecar left by another revision would change the precision
    return folder / "config.json"

"""What a render starts from: the engine folder (by --engine, or found by --profile), the profile its
manifest records, its size, and the bundle the model store will hold (--bundle, checked, or rendered for
/models)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from pipeline.core.artifacts import MANIFEST_NAME, read_manifest
from pipeline.render.bundle import recorded_root
from pipeline.core.errors import InvalidInputError
from pipeline.k8s.spec import MODEL_MOUNT, K8sSpec
from pipeline.render.model_repo import parse_model_config
from pipeline.core.paths import build_root, safe_name, stage_dir
from pipeline.build.profiles import BuildProfile
from pipeline.render import RenderSpec, render


def profile_from_engine(engine_dir: Path) -> BuildProfile:
    """The BuildProfile recorded in an engine folder's manifest.json ({"profile": {...}})."""
    engine_dir = Path(engine_dir)
    manifest = read_manifest(engine_dir)
    if manifest is None:
        raise InvalidInputError(f"{engine_dir} has no readable {MANIFEST_NAME}: it is not an engine folder.",
                                hint="Pass a folder made by `pipeline build` (build/<model>/engines/<profile-id>/).")
    raw = manifest.get("profile") or (manifest.get("inputs") or {}).get("profile")
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{engine_dir / MANIFEST_NAME} records no build profile.",
                                hint="Rebuild the engine with `pipeline build`; its manifest carries the profile.")
    try:
        return BuildProfile(**raw)
    except ValidationError as error:
        raise InvalidInputError(f"The profile in {engine_dir / MANIFEST_NAME} is invalid: {error.errors()[0]['msg']}.",
                                hint="Rebuild the engine with this version of the pipeline.") from error


def find_engine(profile_id: str, root: Path | None = None) -> Path:
    """The engine folder build/*/engines/<profile_id>/ (an id, or a profile's readable name)."""
    root = (root or build_root())
    key = profile_id.strip()
    candidates = sorted(p.parent for p in root.glob(f"*/engines/{safe_name(key, what='profile id')}/{MANIFEST_NAME}"))
    if not candidates:  # a readable name such as trtllm-h100-sxm-fp8-tp1-throughput
        for manifest in sorted(root.glob(f"*/engines/*/{MANIFEST_NAME}")):
            try:
                if profile_from_engine(manifest.parent).name == key:
                    candidates.append(manifest.parent)
            except InvalidInputError:
                continue
    if len(candidates) == 1:
        return candidates[0]
    known = sorted(p.parent.name for p in root.glob(f"*/engines/*/{MANIFEST_NAME}"))
    if not candidates:
        raise InvalidInputError(f"No engine for profile {key!r} under {root}.",
                                hint=f"Known profile ids: {', '.join(known) or 'none (run `pipeline build` first)'}; "
                                "or pass --engine DIR.")
    raise InvalidInputError(f"Profile {key!r} matches {len(candidates)} engines: {', '.join(map(str, candidates))}.",
                            hint="Pass the profile id, or --engine DIR.")


def engine_bytes(engine_dir: Path) -> int:
    """Bytes of every file in the engine folder (links followed: the reference runtime links its checkpoint)."""
    total = 0
    for folder, _dirs, files in os.walk(engine_dir, followlinks=True):
        for name in files:
            if name == MANIFEST_NAME:
                continue
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def python_stub_count(repo: Path) -> int:
    """Python-backend instances of a rendered repository: the stub processes Triton starts for it."""
    count = 0
    for config_path in sorted(Path(repo).glob("*/config.pbtxt")):
        config = parse_model_config(config_path)
        if config.backend == "python":
            count += sum(group.count or 1 for group in config.instance_group) or 1
    return count


def bundle_for(spec: K8sSpec, engine_dir: Path, profile: BuildProfile) -> Path:
    """The bundle the model store will hold: --bundle (checked: rendered for /models, from this profile),
    else rendered (or reused, same inputs) at build/<model>/bundles/<profile-id>/."""
    if spec.bundle is None:
        return render(RenderSpec(engine=engine_dir, model_root=Path(MODEL_MOUNT),
                                 out=stage_dir(profile.model, "bundles", profile.id))).repo
    return given_bundle(Path(spec.bundle), engine_dir, profile)


def given_bundle(bundle: Path, engine_dir: Path, profile: BuildProfile, how: str | None = None) -> Path:
    """--bundle, checked: made for /models from this profile. `how` says how to make a right one."""
    folder = Path(bundle).resolve()
    root = recorded_root(folder)
    how = how or f"Render it with `pipeline render --engine {engine_dir} --model-root {MODEL_MOUNT} --out DIR`"
    if root != Path(MODEL_MOUNT):
        raise InvalidInputError(f"--bundle {folder} is {'rendered for ' + str(root) if root else 'not a rendered bundle'}; "
                                f"the pods read it at {MODEL_MOUNT}.",
                                hint=f"{how}, or leave --bundle out to have it made.")
    recorded = (read_manifest(folder) or {}).get("profile")
    try:
        same = recorded is None or BuildProfile(**recorded).id == profile.id
    except (TypeError, ValidationError):
        same = False
    if not same:
        raise InvalidInputError(f"--bundle {folder} holds another engine than profile {profile.id}.",
                                hint="Pass the bundle rendered from this engine, or leave --bundle out.")
    return folder

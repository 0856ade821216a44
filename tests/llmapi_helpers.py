"""Hand-made PyTorch-backend deployables for the render tests: the layout and manifest keys `pipeline build
--backend pytorch` writes (engines/<id>/{model/, llm_api_options.yaml, manifest.json}) and
pipeline.core.deployable.read_deployable reads, without a real checkpoint (render loads nothing)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml

from pipeline.core.deployable import MODEL_SUBDIR, OPTIONS_FILE

OPTIONS_YAML = """max_batch_size: 4
max_num_tokens: 2048
max_seq_len: 512
kv_cache_config:
  free_gpu_memory_fraction: 0.9
  enable_block_reuse: false
cuda_graph_config:
  batch_sizes: [1, 2, 4]
"""


def make_deployable(root: Path, *, hf_dir: Path | None = None, gpu: str = "cpu", options: str = OPTIONS_YAML,
                    model: str = "smollm2-demo", profile_id: str = "pt-test", simulated: dict | None = None) -> Path:
    """build/<model>/engines/<profile_id>/ with model/ hard-linked from hf_dir (or a config.json and tokenizer
    stand-ins when hf_dir is None: enough for render, which loads nothing)."""
    folder = Path(root) / model / "engines" / profile_id
    (folder / MODEL_SUBDIR).mkdir(parents=True)
    if hf_dir is None:
        (folder / MODEL_SUBDIR / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        (folder / MODEL_SUBDIR / "tokenizer.json").write_text("{}")
    else:
        for path in Path(hf_dir).iterdir():
            if path.is_file() and path.name != "manifest.json":
                try:
                    os.link(path, folder / MODEL_SUBDIR / path.name)
                except OSError:
                    shutil.copy2(path, folder / MODEL_SUBDIR / path.name)
    (folder / OPTIONS_FILE).write_text(options)
    manifest = {"stage": "build", "backend": "pytorch", "runtime": "reference" if gpu == "cpu" else "pytorch",
                "gpu": {"key": gpu}, "options": yaml.safe_load(options), "simulated": simulated,
                "profile": {"model": model, "gpu": gpu, "tp": 1}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def build_cpu_deployable(hf_dir: Path) -> Path:
    """`pipeline build --backend pytorch --gpu cpu --checkpoint hf_dir`, through the library: the deployable the
    user gets (build/<model>/engines/<profile-id>/ beside hf_dir's model folder)."""
    from build_cases import in_build_root
    from pipeline.build import BuildSpec
    from pipeline.build.pytorch import build_pytorch

    with in_build_root(hf_dir.parents[1]):  # hf_dir's build root (build/<model>/hf), not the checkout's build/
        return Path(build_pytorch(BuildSpec(backend="pytorch", gpu="cpu", checkpoint=hf_dir)).deploy_dir)


def load_llmapi_template(monkeypatch, template: Path):
    """The LLM-API model.py as the stub imports it, with a bare triton_python_backend_utils and its folder's
    support module importable (render copies it beside)."""
    import importlib.util
    import sys
    import types

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    monkeypatch.syspath_prepend(str(template.parents[3]))  # model_repo_templates/pipeline_model_support.py
    spec = importlib.util.spec_from_file_location("llmapi_model_under_test", template)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""Helpers of the render tests (test_render.py, test_render_checks.py): engine folders render accepts
without any weights or GPU, and reading a rendered repository's configs back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipeline.render.model_repo import parse_model_config
from pipeline.build.reference_folder import write_reference_engine_dir
from pipeline.render.spec import MODELS


def fake_hf_dir(root: Path) -> Path:
    """Just enough of an HF folder for render (which never loads weights)."""
    hf = root / "hf"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 32, "architectures": ["LlamaForCausalLM"]}))
    (hf / "model.safetensors").write_bytes(b"\0" * 8)
    (hf / "tokenizer.json").write_text("{}")
    (hf / "tokenizer_config.json").write_text("{}")
    return hf


def reference_engine_dir(tmp_path: Path) -> Path:
    """A reference-runtime engine folder (what `pipeline build --gpu cpu` writes)."""
    return write_reference_engine_dir(fake_hf_dir(tmp_path), tmp_path / "engines" / "ref",
                                      {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128})


def trtllm_engine_dir(tmp_path: Path) -> Path:
    """The config.json trtllm-build writes (no engine files needed to render)."""
    engine = tmp_path / "engines" / "trt"
    engine.mkdir(parents=True)
    (engine / "config.json").write_text(json.dumps({
        "version": "1.1.0",
        "pretrained_config": {"architecture": "LlamaForCausalLM", "dtype": "float16"},
        "build_config": {"max_batch_size": 64, "max_input_len": 2048, "max_seq_len": 4096, "max_num_tokens": 8192,
                         "max_beam_width": 1, "plugin_config": {"paged_kv_cache": True, "tokens_per_block": 32,
                                                                "use_paged_context_fmha": True}},
    }))
    shutil.copytree(fake_hf_dir(tmp_path / "trt-source"), engine / "tokenizer")
    return engine


def configs(repo: Path) -> dict:
    """Every model's config.pbtxt of a rendered repository as Triton's ModelConfig."""
    return {model: parse_model_config(repo / model / "config.pbtxt") for model in MODELS}

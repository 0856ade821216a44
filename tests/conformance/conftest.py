"""Fixtures of the conformance suite: small models of every architecture `pipeline convert` supports,
made in the test and brought in through `pipeline download local:` (as a user's folder would be), and
the second Python environment with TensorRT-LLM 1.1's transformers 4.57.1 + ModelOpt 0.37."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
from tiny_models import TINY

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "trtllm11_probe.py"
TRTLLM11_VENV = Path(os.environ.get("PIPELINE_TRTLLM11_VENV", REPO_ROOT / "build" / ".venv-trtllm-1.1"))

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _save_with_demo_tokenizer(model: Any, demo_hf_dir: Path, folder: Path) -> Path:
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(demo_hf_dir / name, folder / name)
    return folder


def _through_download(folder: Path, root: Path) -> Path:
    from pipeline.download import DownloadSpec, download

    return download(DownloadSpec(source=f"local:{folder}", root=root)).path


@pytest.fixture(scope="session")
def tiny_hf(demo_hf_dir: Path, session_build_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """tiny_hf(architecture) -> build/<model>/hf of a 2-layer random model with the demo tokenizer."""
    made: dict[str, Path] = {}

    def make(architecture: str) -> Path:
        if architecture not in made:
            import torch
            import transformers

            config_cls, model_cls, kwargs = TINY[architecture]
            torch.manual_seed(0)
            # a copy: transformers adds rope_theta to the rope_scaling dict it is given
            model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**copy.deepcopy(kwargs)))
            folder = tmp_path_factory.mktemp(f"tiny-{architecture.lower()}")
            made[architecture] = _through_download(_save_with_demo_tokenizer(model, demo_hf_dir, folder), session_build_root)
        return made[architecture]

    return make


@pytest.fixture(scope="session")
def demo_as(demo_hf_dir: Path, session_build_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """demo_as("Qwen2ForCausalLM" | "MistralForCausalLM") -> an HF folder holding the demo model's
    weights in that architecture's class. Both compute what the demo's Llama does (Qwen2's q/k/v
    biases are zero), so the smoke suite's answers stay coherent."""
    made: dict[str, Path] = {}

    def make(architecture: str) -> Path:
        if architecture not in made:
            import torch
            import transformers
            from safetensors.torch import load_file

            source = json.loads((demo_hf_dir / "config.json").read_text(encoding="utf-8"))
            shape = {k: source[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                            "num_hidden_layers", "vocab_size", "max_position_embeddings", "rms_norm_eps",
                                            "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")}
            theta = source["rope_parameters"]["rope_theta"]
            if architecture == "Qwen2ForCausalLM":
                config = transformers.Qwen2Config(**shape, rope_theta=theta)
            elif architecture == "MistralForCausalLM":
                config = transformers.MistralConfig(**shape, head_dim=source["head_dim"], rope_theta=theta, sliding_window=None)
            else:
                raise ValueError(architecture)
            model = getattr(transformers, architecture)(config)
            state = load_file(str(demo_hf_dir / "model.safetensors"))
            missing, unexpected = model.load_state_dict(state, strict=False)
            assert not unexpected and all(name.endswith((".bias", "lm_head.weight")) for name in missing), (missing, unexpected)
            with torch.no_grad():
                for name, parameter in model.named_parameters():
                    if name in missing and name.endswith(".bias"):
                        parameter.zero_()
            model.tie_weights()
            folder = tmp_path_factory.mktemp(f"smollm2-as-{architecture.lower()}")
            _save_with_demo_tokenizer(model, demo_hf_dir, folder)
            shutil.copy(demo_hf_dir / "generation_config.json", folder / "generation_config.json")
            made[architecture] = _through_download(folder, session_build_root)
            shutil.rmtree(folder)  # the download copied it (540 MB of float32 weights): the disk CI has is finite
        return made[architecture]

    return make


@pytest.fixture(scope="session")
def trtllm11_python() -> Path:
    """python of the transformers 4.57.1 + ModelOpt 0.37 environment, made by scripts/trtllm11_venv.sh
    (cached under build/; PIPELINE_TRTLLM11_VENV puts it elsewhere)."""
    done = subprocess.run([str(REPO_ROOT / "scripts" / "trtllm11_venv.sh"), str(TRTLLM11_VENV)],
                          capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        pytest.fail(f"scripts/trtllm11_venv.sh failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def probe(trtllm11_python: Path) -> Callable[..., dict[str, Any]]:
    """probe("read", dir, texts_file) / probe("export", dir, out, layers) under transformers 4.57.1."""

    def run(*args: str) -> dict[str, Any]:
        done = subprocess.run([str(trtllm11_python), str(PROBE), *args], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"})
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run

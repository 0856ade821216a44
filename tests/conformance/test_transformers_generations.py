"""Our hf/ folders and exports read the same under TensorRT-LLM 1.1's transformers 4.57.1 + ModelOpt 0.37
as under the pipeline's transformers 5 + ModelOpt 0.47.

The 4.57.1 side runs for real in a second environment (scripts/trtllm11_venv.sh, cached under build/;
about 75 s to create with a warm pip cache): tests/conformance/trtllm11_probe.py prints what it read.
Before the fix, 4.57.1 read the demo's RoPE base as 10000 (so ModelOpt 0.37 exported rotary_base
10000.0) and could not load its tokenizer at all (class TokenizersBackend).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.convert.checkpoint_keys import check_checkpoint_config
from tiny_models import LLAMA3_SCALING

pytestmark = pytest.mark.slow

TEXTS = ["The capital of France is", "<|im_start|>user\nHi there<|im_end|>\n", "naïve café — 東京 🚀  tabs\tand  spaces",
         "def add(a, b):\n    return a + b\n"]


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("texts") / "texts.json"
    path.write_text(json.dumps(TEXTS), encoding="utf-8")
    return path


def test_demo_config_and_tokenizer_read_the_same_under_4_57(demo_hf_dir: Path, probe, texts_file: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    seen = probe("read", str(demo_hf_dir), str(texts_file))
    assert seen["transformers"] == "4.57.1"
    assert seen["rope_theta"] == 100000.0, "SmolLM2's RoPE base; 10000 is transformers 4.x's default"
    assert AutoConfig.from_pretrained(demo_hf_dir).rope_parameters["rope_theta"] == seen["rope_theta"]
    assert seen["rope_scaling"] is None and seen["architectures"] == ["LlamaForCausalLM"]

    tokenizer = AutoTokenizer.from_pretrained(demo_hf_dir)
    assert seen["tokenizer_class"] == "PreTrainedTokenizerFast" and seen["eos_token"] == tokenizer.eos_token == "<|im_end|>"
    assert seen["ids"] == [tokenizer(text)["input_ids"] for text in TEXTS]
    chat = tokenizer.apply_chat_template([{"role": "user", "content": TEXTS[0]}], add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]
    assert seen["chat_ids"] == list(chat)


def test_llama3_rope_reads_the_same_under_4_57(tiny_hf, probe, texts_file: Path) -> None:
    from transformers import AutoConfig

    hf_dir = tiny_hf("LlamaForCausalLM")
    seen = probe("read", str(hf_dir), str(texts_file))
    assert seen["rope_theta"] == 500000.0
    assert {k: v for k, v in seen["rope_scaling"].items() if k != "type"} == LLAMA3_SCALING
    assert AutoConfig.from_pretrained(hf_dir).rope_parameters == {**LLAMA3_SCALING, "rope_theta": 500000.0}


def test_modelopt_037_fp8_export_keeps_the_rope(demo_hf_dir: Path, tiny_hf, probe, tmp_path: Path) -> None:
    demo = probe("export", str(demo_hf_dir), str(tmp_path / "demo"), "2")
    assert demo["modelopt"].startswith("0.37.") and demo["config"]["quantization"]["quant_algo"] == "FP8"
    assert demo["config"]["rotary_base"] == 100000.0

    hf_dir = tiny_hf("LlamaForCausalLM")
    llama3 = probe("export", str(hf_dir), str(tmp_path / "llama3"), "2")["config"]
    assert llama3["rotary_base"] == 500000.0
    assert llama3["rotary_scaling"].get("type", llama3["rotary_scaling"].get("rope_type")) == "llama3"
    # and the whole config is what TensorRT-LLM's LLaMA class reads from this HF config
    check_checkpoint_config(llama3, json.loads((hf_dir / "config.json").read_text(encoding="utf-8")))

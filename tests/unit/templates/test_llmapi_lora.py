"""Per-request LoRA in the LLM-API model (model_repo_templates/llmapi/tensorrt_llm/1/model.py): the inputs
lora_name / lora_path / lora_id (named after NVIDIA's later version of the model, whose helpers.py
get_lora_request_from_request reads them) become a LoRARequest for generate_async on a GPU, and on the CPU the
reference runtime serves the PEFT folder: its output is PEFT's own."""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from lora_cases import ATTENTION, MLP, make_adapter, peft_greedy
from llmapi_helpers import load_llmapi_template

TEMPLATE = Path(__file__).resolve().parents[3] / "model_repo_templates" / "llmapi" / "tensorrt_llm" / "1" / "model.py"


def _load_template(monkeypatch):
    return load_llmapi_template(monkeypatch, TEMPLATE)


def _job(template, prompt: bytes, **inputs):
    values = {"text_input": np.array([prompt], dtype=np.object_)}
    for name, value in inputs.items():
        values[name] = np.array([value], dtype=np.object_ if isinstance(value, bytes) else np.uint64)
    return template.Job(values.get)


def test_lora_inputs_come_together_and_name_a_folder_on_the_server(monkeypatch, tmp_path) -> None:
    template = _load_template(monkeypatch)
    with pytest.raises(ValueError, match="lora_id, lora_name, and lora_path must all be provided together"):
        _job(template, b"hi", lora_id=3, lora_name=b"a")
    with pytest.raises(ValueError, match="lora_path does not exist on the Triton server's filesystem"):
        _job(template, b"hi", lora_id=3, lora_name=b"a", lora_path=str(tmp_path / "none").encode())
    with pytest.raises(ValueError, match="lora_ckpt_source must be one of"):
        _job(template, b"hi", lora_id=3, lora_name=b"a", lora_path=str(tmp_path).encode(), lora_ckpt_source=b"x")
    assert _job(template, b"hi").lora is None
    assert _job(template, b"hi", lora_id=3, lora_name=b"a", lora_path=str(tmp_path).encode()).lora == (
        "a", 3, str(tmp_path), "hf")


def test_gpu_branch_hands_a_lora_request_to_generate_async(monkeypatch, tmp_path) -> None:
    """The LLM API itself cannot run here: a stand-in records what generate_async is given."""
    template = _load_template(monkeypatch)
    calls = []

    class LLM:
        def __init__(self, **kwargs):
            pass

        def generate_async(self, prompt, params, streaming, **kwargs):
            calls.append(kwargs)
            raise RuntimeError("stand-in")

        def shutdown(self):
            pass

    class LoRARequest:  # 1.1's tensorrt_llm/executor/request.py signature
        def __init__(self, lora_name, lora_int_id, lora_path="", lora_ckpt_source="hf"):
            self.fields = (lora_name, lora_int_id, lora_path, lora_ckpt_source)

    llm_utils = types.SimpleNamespace(update_llm_args_with_extra_dict=lambda args, extra: {})
    request_module = types.SimpleNamespace(LoRARequest=LoRARequest)
    for name, module in {"tensorrt_llm": types.SimpleNamespace(LLM=LLM, SamplingParams=dict),
                         "tensorrt_llm.llmapi": types.SimpleNamespace(llm_utils=llm_utils),
                         "tensorrt_llm.llmapi.llm_utils": llm_utils,
                         "tensorrt_llm.executor": types.SimpleNamespace(request=request_module),
                         "tensorrt_llm.executor.request": request_module}.items():
        monkeypatch.setitem(sys.modules, name, module)
    engine = template._LlmApiEngine({"model": "m"})
    failed = threading.Event()
    try:
        for job in (_job(template, b"hi"), _job(template, b"hi", lora_id=5, lora_name=b"sql",
                                                lora_path=str(tmp_path).encode())):
            failed.clear()
            engine.submit(job, lambda update: None, lambda message: failed.set())
            assert failed.wait(5)
    finally:
        engine.close()
    assert calls[0] == {}  # no LoRA: generate_async as before
    assert calls[1]["lora_request"].fields == ("sql", 5, str(tmp_path), "hf")


def test_reference_runtime_serves_the_peft_folder(monkeypatch, tiny_ckpt, tmp_path) -> None:
    template = _load_template(monkeypatch)
    adapter = make_adapter(tiny_ckpt, tmp_path / "adapter", rank=4, targets=ATTENTION + MLP, seed=5, scale=0.5)
    engine = template._ReferenceEngine({"model": str(tiny_ckpt), "max_seq_len": 64, "max_batch_size": 2,
                                        "kv_cache_config": {"max_tokens": 512, "tokens_per_block": 16}}, {})
    prompt = "w1 w2 w3 w4"
    ids = list(engine.tokenizer(prompt, add_special_tokens=True)["input_ids"])
    expected = {name: engine.tokenizer.decode(peft_greedy(tiny_ckpt, folder, ids, 8)[0], skip_special_tokens=True)
                for name, folder in (("base", None), ("lora", adapter))}
    assert expected["base"] != expected["lora"]

    def ask(**lora):
        done, texts = threading.Event(), []
        job = _job(template, prompt.encode(), sampling_param_max_tokens=8,
                   **{"sampling_param_exclude_input_from_output": True, **lora})
        engine.submit(job, lambda update: update.finished and (texts.append(update.text), done.set()),
                      lambda message: (texts.append(message), done.set()))
        assert done.wait(60)
        return texts[0]

    lora = {"lora_id": 0, "lora_name": b"t", "lora_path": str(adapter).encode()}  # 0 is an id the LLM API takes
    try:
        assert ask(**lora) == expected["lora"]
        assert ask() == expected["base"]
        assert ask(**lora) == expected["lora"]  # from the engine's cache now
        assert engine.engine.lora.cache.task_ids() == [1]
    finally:
        engine.close()

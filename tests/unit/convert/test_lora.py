"""PEFT adapters -> TensorRT-LLM's lora_weights / lora_config (hf_lora_convert.py's layout), and the refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from lora_cases import ATTENTION, MLP, make_adapter, tiny_llama
from pipeline.convert.lora import LoraTarget, load_peft_adapter, to_trtllm_lora, write_trtllm_lora
from pipeline.core.errors import InvalidInputError
from pipeline.reference_runtime.lora import lora_modules, to_float32


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "base")


@pytest.fixture(scope="module")
def adapter_dir(base, tmp_path_factory):
    return make_adapter(base, tmp_path_factory.mktemp("a") / "adapter", rank=4, targets=ATTENTION + MLP, alpha=16)


def _peft_state(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_module_table_has_nvidias_ids_and_names() -> None:
    by_hf = {m.hf_module: (m.module, m.module_id) for m in lora_modules()}
    assert by_hf["gate_proj"] == ("mlp_h_to_4h", 5) and by_hf["up_proj"] == ("mlp_gate", 7)
    assert by_hf["q_proj"] == ("attn_q", 1) and by_hf["down_proj"] == ("mlp_4h_to_h", 6)
    assert by_hf["o_proj"] == ("attn_dense", 4) and by_hf["qkv_proj"] == ("attn_qkv", 0)


def test_rows_are_a_then_scaled_b_in_file_order(adapter_dir) -> None:
    adapter = load_peft_adapter(adapter_dir)
    lora = to_trtllm_lora(adapter, "float32")
    state = _peft_state(adapter_dir)
    layers, modules = 2, len(ATTENTION + MLP)
    assert lora.weights.shape[:2] == (1, layers * modules) and lora.config.shape == (1, layers * modules, 3)
    assert lora.config.dtype == np.int32 and lora.weights.dtype == np.float32
    assert lora.rank == 4 and set(lora.target_modules) == {m.module for m in lora_modules()
                                                           if m.hf_module in ATTENTION + MLP}
    ids = {m.hf_module: m.module_id for m in lora_modules()}
    keys = [k for k in state if k.endswith("lora_A.weight")]
    for row, key in enumerate(keys):  # the file's order, as NVIDIA's script keeps it
        layer, module = int(key.split(".layers.")[1].split(".")[0]), key.split(".")[-3]
        a, b = state[key].numpy(), state[key.replace("lora_A", "lora_B")].numpy()
        assert lora.config[0, row].tolist() == [ids[module], layer, 4]
        expected = np.concatenate([a.ravel(), (b * (16 / 4)).ravel()])
        np.testing.assert_allclose(lora.weights[0, row, : expected.size], expected, rtol=1e-6)
        assert not lora.weights[0, row, expected.size:].any()  # zero padding to the longest row


def test_rslora_scale_is_alpha_over_sqrt_r(base, tmp_path) -> None:
    folder = make_adapter(base, tmp_path / "rs", rank=16, targets=("q_proj",), alpha=8, rslora=True)
    adapter = load_peft_adapter(folder)
    assert adapter.scale == pytest.approx(8 / math.sqrt(16))
    lora = to_trtllm_lora(adapter, "float32")
    b = _peft_state(folder)["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"].numpy()
    np.testing.assert_allclose(lora.weights[0, 0, 16 * 64: 16 * 64 + b.size], (b * 2.0).ravel(), rtol=1e-6)


@pytest.mark.parametrize("dtype,numpy_dtype", [("float16", np.float16), ("bfloat16", np.dtype("V2"))])
def test_storage_dtype_is_the_engines(adapter_dir, dtype, numpy_dtype, tmp_path) -> None:
    lora = to_trtllm_lora(load_peft_adapter(adapter_dir), dtype)
    assert lora.weights.dtype == numpy_dtype
    reference = to_trtllm_lora(load_peft_adapter(adapter_dir), "float32").weights
    torch_dtype = torch.float16 if dtype == "float16" else torch.bfloat16
    expected = torch.from_numpy(reference).to(torch_dtype).float().numpy()
    np.testing.assert_array_equal(to_float32(lora.weights), expected)
    write_trtllm_lora(lora, tmp_path / "out")
    assert np.load(tmp_path / "out" / "model.lora_weights.npy").dtype == numpy_dtype
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "model.lora_config.npy"), lora.config)


def _edit_config(folder, **changes):
    path = folder / "adapter_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("changes,named", [({"use_dora": True}, "DoRA"),
                                           ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
                                           ({"rank_pattern": {"q_proj": 8}}, "rank_pattern")])
def test_refused_by_name(adapter_dir, tmp_path, changes, named) -> None:
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(adapter_dir, folder)
    _edit_config(folder, **changes)
    with pytest.raises(InvalidInputError, match=named) as caught:
        load_peft_adapter(folder)
    assert caught.value.hint


def test_missing_files_are_refused(tmp_path) -> None:
    with pytest.raises(InvalidInputError, match="adapter_config.json"):
        load_peft_adapter(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8}))
    with pytest.raises(InvalidInputError, match="adapter_model.safetensors"):
        load_peft_adapter(tmp_path)


@pytest.mark.parametrize("target,message", [
    (LoraTarget(hidden_size=128, num_layers=2, max_rank=64), "hidden size 64"),
    (LoraTarget(hidden_size=64, num_layers=1, max_rank=64), "layer 1; the engine has 1 layers"),
    (LoraTarget(hidden_size=64, num_layers=2, max_rank=2), "rank 4 exceeds the engine's max LoRA rank 2"),
    (LoraTarget(hidden_size=64, num_layers=2, max_rank=64, target_modules=("attn_q",)), "built without LoRA"),
])
def test_target_mismatch_is_invalid_input(adapter_dir, target, message) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        to_trtllm_lora(load_peft_adapter(adapter_dir), "float32", target)
    assert caught.value.hint


def test_matching_target_passes(adapter_dir) -> None:
    modules = tuple(m.module for m in lora_modules())
    lora = to_trtllm_lora(load_peft_adapter(adapter_dir), "float16",
                          LoraTarget(hidden_size=64, num_layers=2, max_rank=4, target_modules=modules))
    assert lora.rank == 4


def test_unknown_storage_dtype(adapter_dir) -> None:
    with pytest.raises(InvalidInputError, match="int8"):
        to_trtllm_lora(load_peft_adapter(adapter_dir), "int8")

"""The tensors `pipeline convert` exports, per rank, against the HF weights they come from: a wrong
tensor-parallel split axis (or q/k/v order, or fc/gate swap) keeps every shape and name right, so only
the values show it.

The layout is what TensorRT-LLM's layers load each rank's slice into (NVIDIA/TensorRT-LLM, stored version
04a2cacb, tensorrt_llm/layers/): ColumnLinear (qkv, mlp.fc, mlp.gate, lm_head) holds a slice of the
output features, rows of the [out, in] weight; RowLinear (attention.dense, mlp.proj: `self.proj =
RowLinear(ffn_hidden_size, hidden_size, ...)` in mlp.py) a slice of the input features, columns; the
fused qkv of a rank is its q heads, then its k heads, then its v heads (convert_utils.split_qkv_tp); the
gated MLP computes SiLU(fc(x)) * gate(x) (mlp.py, FusedGatedMLP.fc_gate), so fc is HF's gate_proj and gate
is up_proj; with a parallel embedding the vocabulary is split (dim 0). Norms are whole on every rank.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from pipeline.convert import ConvertSpec, convert
from tiny_models import TINY

pytestmark = pytest.mark.slow

TP = 2


def _rows(tensor: torch.Tensor, rank: int) -> torch.Tensor:
    return torch.chunk(tensor, TP, dim=0)[rank]


def _columns(tensor: torch.Tensor, rank: int) -> torch.Tensor:
    return torch.chunk(tensor, TP, dim=1)[rank]


def _expected(hf: dict[str, torch.Tensor], layers: int, rank: int) -> dict[str, torch.Tensor]:
    """The tensors rank `rank` of a TP checkpoint must hold, computed from the HF state dict."""
    want = {
        "transformer.vocab_embedding.weight": _rows(hf["model.embed_tokens.weight"], rank),
        "lm_head.weight": _rows(hf["lm_head.weight"], rank),
        "transformer.ln_f.weight": hf["model.norm.weight"],
    }
    for i in range(layers):
        src, dst = f"model.layers.{i}.", f"transformer.layers.{i}."
        q, k, v = (hf[src + f"self_attn.{name}_proj.weight"] for name in "qkv")
        want[dst + "attention.qkv.weight"] = torch.cat([_rows(q, rank), _rows(k, rank), _rows(v, rank)], dim=0)
        want[dst + "attention.dense.weight"] = _columns(hf[src + "self_attn.o_proj.weight"], rank)
        want[dst + "mlp.fc.weight"] = _rows(hf[src + "mlp.gate_proj.weight"], rank)
        want[dst + "mlp.gate.weight"] = _rows(hf[src + "mlp.up_proj.weight"], rank)
        want[dst + "mlp.proj.weight"] = _columns(hf[src + "mlp.down_proj.weight"], rank)
        want[dst + "input_layernorm.weight"] = hf[src + "input_layernorm.weight"]
        want[dst + "post_layernorm.weight"] = hf[src + "post_attention_layernorm.weight"]
    return want


def test_fp16_tp2_ranks_hold_the_hf_weights_split_on_the_right_axes(tiny_hf, session_build_root) -> None:
    hf_dir = tiny_hf("LlamaForCausalLM")
    hf = {name: tensor for file in sorted(hf_dir.glob("*.safetensors")) for name, tensor in load_file(file).items()}
    layers = TINY["LlamaForCausalLM"][2]["num_hidden_layers"]
    result = convert(ConvertSpec(model=str(hf_dir), quant="fp16", tp=TP, root=session_build_root))
    for rank in range(TP):
        exported = load_file(result.path / f"rank{rank}.safetensors")
        want = _expected(hf, layers, rank)
        assert set(exported) == set(want), f"rank {rank}: {sorted(set(exported) ^ set(want))}"
        for name, tensor in want.items():
            got = exported[name]
            assert got.dtype == torch.float16, (rank, name, got.dtype)
            assert got.shape == tensor.shape, (rank, name, tuple(got.shape), tuple(tensor.shape))
            assert torch.equal(got, tensor.to(torch.float16)), f"rank {rank}: {name} holds other values"
    # the split is a split: the two ranks differ where they must (a copy of rank 0 on both would pass shapes)
    r0, r1 = (load_file(result.path / f"rank{r}.safetensors") for r in range(TP))
    assert not torch.equal(r0["transformer.layers.0.attention.qkv.weight"], r1["transformer.layers.0.attention.qkv.weight"])

"""Models of a chosen size with random weights, for measuring how the pipeline's cost grows with the
parameter count (`make bench-scale`, scripts/bench_scale.py).

`write_random_llama` writes a Llama-shaped HF checkpoint folder (config.json, sharded
model-*.safetensors + index, generation config) with the tokenizer files of another folder (the
demo's), so the result converts, builds and renders like a downloaded model. Weights are drawn
layer by layer (normal, std 0.02; norms 1), so writing a 1B model holds one shard in memory, not
the model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel, ConfigDict, Field

from pipeline.core.errors import InvalidInputError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")
SHARD_BYTES = 1 << 30


class LlamaShape(BaseModel):
    """The shapes of a Llama-architecture model (what config.json says)."""

    model_config = ConfigDict(frozen=True)

    hidden_size: int = Field(ge=8)
    intermediate_size: int = Field(ge=8)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_key_value_heads: int = Field(ge=1)
    vocab_size: int = Field(ge=8)
    tie_word_embeddings: bool = True
    rope_theta: float = 500000.0
    max_position_embeddings: int = 8192

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def tensors(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """(name, shape) of every weight, in the order LlamaForCausalLM's state dict has them."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_key_value_heads * d
        yield "model.embed_tokens.weight", (self.vocab_size, h)
        for n in range(self.num_hidden_layers):
            p = f"model.layers.{n}."
            yield p + "self_attn.q_proj.weight", (q, h)
            yield p + "self_attn.k_proj.weight", (kv, h)
            yield p + "self_attn.v_proj.weight", (kv, h)
            yield p + "self_attn.o_proj.weight", (h, q)
            yield p + "mlp.gate_proj.weight", (i, h)
            yield p + "mlp.up_proj.weight", (i, h)
            yield p + "mlp.down_proj.weight", (h, i)
            yield p + "input_layernorm.weight", (h,)
            yield p + "post_attention_layernorm.weight", (h,)
        yield "model.norm.weight", (h,)
        if not self.tie_word_embeddings:
            yield "lm_head.weight", (self.vocab_size, h)

    @property
    def param_count(self) -> int:
        total = 0
        for _, shape in self.tensors():
            count = 1
            for dim in shape:
                count *= dim
            total += count
        return total

    def config(self, dtype: str) -> dict:
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim, "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings, "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": 1e-5, "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_theta": self.rope_theta, "rope_type": "default"},
            "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02, "use_cache": True,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "dtype": dtype,
        }


def llama_1b_shape(vocab_size: int) -> LlamaShape:
    """Llama 3.2 1B's layers (hidden 2048, MLP 8192, 16 layers, 32 heads, 8 KV heads, tied
    embeddings) with the given vocabulary: 1.07B parameters with the demo's 49152 tokens."""
    return LlamaShape(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=vocab_size)


def write_random_llama(out: Path, shape: LlamaShape, tokenizer_dir: Path, *, dtype: str = "float16", seed: int = 0) -> Path:
    """A loadable HF checkpoint of `shape` with random weights and tokenizer_dir's tokenizer in out/."""
    import torch
    from safetensors.torch import save_file

    tokenizer_config = json.loads((tokenizer_dir / "config.json").read_text(encoding="utf-8"))
    if int(tokenizer_config.get("vocab_size", 0)) > shape.vocab_size:
        raise InvalidInputError(f"The tokenizer in {tokenizer_dir} has {tokenizer_config['vocab_size']} tokens; "
                                f"the shape has only {shape.vocab_size}.", hint="Use the tokenizer's vocab_size.")
    out.mkdir(parents=True, exist_ok=True)
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(seed)
    groups = _shard_groups(shape, torch.tensor([], dtype=torch_dtype).element_size())
    weight_map: dict[str, str] = {}
    total = 0
    for index, group in enumerate(groups, 1):
        file = f"model-{index:05d}-of-{len(groups):05d}.safetensors"
        tensors = {}
        for name, dims in group:
            if len(dims) == 1:
                tensors[name] = torch.ones(dims, dtype=torch_dtype)
            else:
                tensors[name] = (torch.randn(dims, generator=generator, dtype=torch.float32) * 0.02).to(torch_dtype)
            weight_map[name] = file
            total += tensors[name].numel() * tensors[name].element_size()
        save_file(tensors, str(out / file), metadata={"format": "pt"})
        del tensors
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n", encoding="utf-8")
    (out / "config.json").write_text(json.dumps(shape.config(dtype), indent=2) + "\n", encoding="utf-8")
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out / name)
    return out


def _shard_groups(shape: LlamaShape, element_size: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The tensors split into shards of at most SHARD_BYTES (one tensor bigger than that gets its own)."""
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, dims in shape.tensors():
        nbytes = element_size
        for dim in dims:
            nbytes *= dim
        if groups[-1] and size + nbytes > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append((name, dims))
        size += nbytes
    return groups

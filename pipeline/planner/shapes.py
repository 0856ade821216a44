"""Model shapes: the sizes that decide memory and FLOPs, read from a Hugging Face config.json (no weights)."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.planner.checkpoint import (attention_projections, checkpoint_precision, excluded_module_globs,
                                         sixteen_bit_linear_params)
from pipeline.planner.latent import LatentAttention, latent_attention_from


class ModelSpec(BaseModel):
    """The shapes that decide memory and FLOPs, read from an HF config.json."""

    model_config = ConfigDict(frozen=True)

    name: str
    model_type: str
    architecture: str | None = None  # config.json's first `architectures` entry (what TensorRT-LLM picks its model class by)
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int | None = None
    dtype: str | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    num_experts: int = 1  # MoE: routed experts per MoE layer (1 = dense)
    experts_per_token: int = 1
    expert_intermediate_size: int | None = None  # a routed expert's MLP width (None: intermediate_size)
    shared_expert_intermediate_size: int = 0  # an always-active shared expert's MLP width in each MoE layer
    moe_layers: int | None = None  # layers with routed experts (None: every layer of an MoE); the others are dense
    shared_expert_gate: bool = False  # Qwen2-MoE: a hidden -> 1 gate on the shared expert in each MoE layer
    qk_norm: bool = False  # Qwen3, Gemma 3: RMSNorm weights on each head's queries and keys
    sliding_windows: tuple[int, ...] = ()  # per layer: the tokens a sliding-window layer attends to, 0 = every token (empty: all)
    attention_chunks: tuple[int, ...] = ()  # per layer: Llama 4's chunk (a token sees its own C-token chunk), 0 = none
    # What the checkpoint itself declares it stores (checkpoint_precision): None where it declares nothing (16-bit weights)
    checkpoint_quant: str | None = None  # the planner precision of its linear layers (e.g. "fp8" for NVIDIA's FP8 checkpoints)
    checkpoint_kv_cache: str | None = None  # the KV-cache precision it was calibrated for ("fp8"), where it names one
    expert_weights: str | None = None  # "mxfp4": routed experts stored as MXFP4 (GPT-OSS), every other layer at checkpoint_quant
    sixteen_bit_params: int = 0  # linear weights a quantized checkpoint excludes from its quantization (exclude_modules)
    unread_quantization: str | None = None  # a quantization the planner cannot read (its quant_method): --quant must name it
    latent_attention: LatentAttention | None = None  # multi-head latent attention (DeepSeek-V3): its cache and math differ

    def attended_tokens(self, context: float, *, prefill: bool = False) -> float:
        """The tokens a layer attends to, the mean over layers: `context` (a decoding sequence's KV length, or for
        `prefill` a prompt token's mean causal span) where every layer sees every token; a sliding-window layer sees at
        most its last W; a chunked layer only its own chunk: a decoding token at position p the (p mod C) + 1 tokens
        since the chunk began, a prompt token half a chunk on average once the prompt spans chunks."""
        if not self.sliding_windows and not self.attention_chunks:
            return context

        def span(window: int, chunk: int) -> float:
            if chunk:
                return min(context, chunk / 2) if prefill else (context - 1) % chunk + 1 if context > chunk else context
            return min(context, window) if window else context

        groups = _layer_groups(self.sliding_windows, self.attention_chunks)
        return sum(count * span(window, chunk) for window, chunk, count in groups) / sum(count for *_, count in groups)

    # parameter counts --------------------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        weights = sum(params for _, params in attention_projections(self))
        if self.attention_bias and not self.latent_attention:
            weights += (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        return weights

    def _mlp_params(self, width: int) -> int:
        """A gated MLP (gate, up, down) of this width."""
        bias = (2 * width + self.hidden_size) if self.mlp_bias else 0
        return 3 * self.hidden_size * width + bias if width else 0

    @property
    def expert_width(self) -> int:
        """A routed expert's MLP width (intermediate_size where the config gives no width of its own)."""
        return self.expert_intermediate_size or self.intermediate_size

    @property
    def moe_layer_count(self) -> int:
        if self.num_experts <= 1:
            return 0
        return self.num_layers if self.moe_layers is None else self.moe_layers

    def _mlp_params_per_layer(self, experts: int) -> float:
        """MLP weights per layer, averaged over the dense and MoE layers, with `experts` routed experts counted."""
        moe = self.moe_layer_count
        routed = experts * self._mlp_params(self.expert_width) + self._mlp_params(self.shared_expert_intermediate_size)
        routed += self.hidden_size * (self.num_experts + self.shared_expert_gate)  # the router (and the shared expert's gate)
        return ((self.num_layers - moe) * self._mlp_params(self.intermediate_size) + moe * routed) / self.num_layers

    @property
    def matmul_params_per_layer(self) -> float:
        """Weights of every linear layer in one decoder layer (all experts; the mean over dense and MoE layers)."""
        return self.attention_params_per_layer + self._mlp_params_per_layer(self.num_experts)

    @property
    def linear_params(self) -> float:
        """Weights of every linear layer of the model (what a quantizer quantizes; all experts)."""
        return self.num_layers * self.matmul_params_per_layer

    @property
    def active_matmul_params_per_layer(self) -> float:
        """Weights one token multiplies through in one layer (top-k and shared experts for MoE; the mean over layers)."""
        return self.attention_params_per_layer + self._mlp_params_per_layer(self.experts_per_token if self.moe_layer_count else 1)

    @property
    def routed_expert_params(self) -> int:
        """Weights of every routed expert of every MoE layer (0 for a dense model)."""
        return self.moe_layer_count * self.num_experts * self._mlp_params(self.expert_width)

    @property
    def routed_active_params_per_token(self) -> int:
        """The routed experts' weights one token multiplies through, over all layers (k experts of each MoE layer; 0 for a
        dense model): the part of active_params_per_token that grouped expert GEMMs run."""
        return self.moe_layer_count * self.experts_per_token * self._mlp_params(self.expert_width)

    @property
    def active_intermediate_size(self) -> float:
        """The MLP width one token runs through per layer (top-k routed plus shared experts; the mean over layers)."""
        moe = self.moe_layer_count
        routed = self.experts_per_token * self.expert_width + self.shared_expert_intermediate_size
        return ((self.num_layers - moe) * self.intermediate_size + moe * routed) / self.num_layers

    @property
    def norm_params(self) -> int:
        qk = 2 * self.head_dim if self.qk_norm else 0
        latent = self.latent_attention.norm_params if self.latent_attention else 0
        return (2 * self.num_layers + 1) * self.hidden_size + self.num_layers * (qk + latent)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate lm_head weights (0 when tied to the embeddings)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        return int(
            self.linear_params
            + self.norm_params
            + self.embedding_params
            + self.lm_head_params
        )

    @property
    def active_params_per_token(self) -> int:
        """Multiply-accumulate weights per token through the layers (the lm_head is counted apart)."""
        return int(self.num_layers * self.active_matmul_params_per_layer)

    @property
    def head_flops_per_token(self) -> int:
        return 2 * self.vocab_size * self.hidden_size


@lru_cache(maxsize=64)
def _layer_groups(windows: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
    """(window, chunk, layers) for each kind of layer: the per-layer tuples counted once, not walked on every step the
    time model prices (an empty tuple: no layer has one)."""
    layers = max(len(windows), len(chunks))
    pairs = zip(windows or (0,) * layers, chunks or (0,) * layers)
    return tuple((window, chunk, count) for (window, chunk), count in Counter(pairs).items())


def _first_architecture(raw: dict[str, Any]) -> str | None:
    names = raw.get("architectures")
    return str(names[0]) if isinstance(names, list) and names else None


def _config_path(path: str | Path) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_dir():
        candidate = candidate / "config.json"
    if not candidate.is_file():
        raise InvalidInputError(
            f"No Hugging Face config.json at {path}.",
            hint="Pass a model folder that holds config.json (e.g. build/<model>/hf) or the config.json file itself.",
        )
    return candidate


def model_spec_from_config(path: str | Path) -> ModelSpec:
    """A ModelSpec from an HF folder or config.json (GQA-aware; head_dim from config or hidden/heads)."""
    config_file = _config_path(path)
    try:
        raw: dict[str, Any] = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidInputError(f"Cannot read {config_file}: {error}", hint="Pass a valid HF config.json.") from None
    name = config_file.parent.name if config_file.name == "config.json" else config_file.stem
    modelopt = config_file.parent / "hf_quant_config.json"
    if config_file.name == "config.json" and isinstance(raw, dict) and modelopt.is_file():  # read first, as TensorRT-LLM does
        try:
            quantization = json.loads(modelopt.read_text(encoding="utf-8")).get("quantization")
        except (OSError, json.JSONDecodeError, AttributeError) as error:
            raise InvalidInputError(f"Cannot read {modelopt}: {error}", hint="Pass a valid ModelOpt hf_quant_config.json.") from None
        if isinstance(quantization, dict):
            raw = {**raw, "quantization_config": {**quantization, "quant_method": "modelopt"}}
    return model_spec_from_dict(raw, name, source=str(config_file))


def model_spec_from_dict(raw: dict[str, Any], name: str, source: str = "the config") -> ModelSpec:
    """A ModelSpec from the keys of an HF config (the one place that reads them; source names it in errors)."""
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{source} is not a JSON object.", hint="Pass a valid HF config.json.")
    if isinstance(raw.get("text_config"), dict):  # multimodal wrappers keep the LM in text_config
        raw = {**raw, **raw["text_config"]}
    recurrent = _non_attention_layers(raw)
    if recurrent:
        raise UnsupportedError(
            f"{source} mixes attention with {recurrent} layers ({raw.get('model_type', 'unknown')}): the planner gives every "
            "layer a KV cache and attention's math, so it would misstate memory and speed.",
            hint="Plan a model whose layers are all attention (full, sliding-window or chunked); size hybrid models from "
                 "NVIDIA's published figures or your own bench.",
        )
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    missing = [key for key in required if not raw.get(key)]
    if missing:
        raise UnsupportedError(
            f"{source} lacks {', '.join(missing)}: it is not a decoder-only causal LM config the planner understands.",
            hint="The planner reads Llama-style configs (hidden_size, num_hidden_layers, num_attention_heads, vocab_size).",
        )
    hidden = int(raw["hidden_size"])
    heads = int(raw["num_attention_heads"])
    latent = latent_attention_from(raw, source)
    # MLA: a head's query and key width (transformers' DeepseekV3Config sets a head_dim of its own: the RoPE part)
    head_dim = latent.query_key_dim if latent else raw.get("head_dim") or hidden // heads
    experts = int(raw.get("num_local_experts") or raw.get("num_experts") or raw.get("n_routed_experts") or 1)
    moe = _moe_shape(raw, int(raw["num_hidden_layers"])) if experts > 1 else {}
    intermediate = moe.pop("dense_intermediate_size", None) or raw.get("intermediate_size") or raw.get("moe_intermediate_size") or 4 * hidden
    spec = ModelSpec(
        name=name,
        model_type=str(raw.get("model_type", "unknown")),
        architecture=_first_architecture(raw),
        hidden_size=hidden,
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        intermediate_size=int(intermediate),
        vocab_size=int(raw["vocab_size"]),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        max_position_embeddings=raw.get("max_position_embeddings"),
        dtype=raw.get("torch_dtype") or raw.get("dtype"),
        attention_bias=bool(raw.get("attention_bias", raw.get("model_type") in {"qwen2", "qwen2_moe"})),
        mlp_bias=bool(raw.get("mlp_bias", False)),
        num_experts=experts,
        experts_per_token=int(raw.get("num_experts_per_tok") or raw.get("experts_per_token") or 1) if experts > 1 else 1,
        qk_norm=str(raw.get("model_type", "")).startswith(("qwen3", "gemma3")),
        sliding_windows=_sliding_windows(raw, int(raw["num_hidden_layers"])),
        attention_chunks=_attention_chunks(raw, int(raw["num_hidden_layers"])),
        latent_attention=latent,
        **moe,
        **checkpoint_precision(raw),
    )
    globs = excluded_module_globs(raw) if spec.checkpoint_quant not in (None, "fp16", "bf16") else ()
    return spec.model_copy(update={"sixteen_bit_params": sixteen_bit_linear_params(spec, globs)}) if globs else spec


_ATTENTION_LAYER_KINDS = {"full_attention", "sliding_attention", "chunked_attention", "attention"}


def _non_attention_layers(raw: dict[str, Any]) -> str | None:
    """What kind of non-attention layers a hybrid config declares (None: every layer is attention), from the keys
    transformers' config classes give them: Mamba/SSM layers (mamba_* or ssm_state_size: Jamba, Bamba, Falcon-H1,
    Nemotron-H, Granite 4 hybrids, Zamba 2), and layer_types / block_types / layers_block_type naming any other kind
    (Qwen3-Next's linear attention, LFM2's convolutions, RecurrentGemma's recurrent blocks)."""
    if any(key.startswith("mamba_") or key == "ssm_state_size" for key in raw):
        return "Mamba (state-space)"
    for key in ("layer_types", "block_types", "layers_block_type"):
        kinds = raw.get(key)
        if isinstance(kinds, list):
            other = sorted({str(kind) for kind in kinds} - _ATTENTION_LAYER_KINDS)
            if other:
                return "/".join(other)
    return None


def _sliding_windows(raw: dict[str, Any], layers: int) -> tuple[int, ...]:
    """Each layer's attention window (0: the whole context), as the families that window declare it: `layer_types`
    ("sliding_attention" layers see the last `sliding_window` tokens; Gemma 2/3, GPT-OSS and newer configs), else Gemma 2
    (every other layer from the first), Gemma 3 (all but every `sliding_window_pattern`-th), Mistral and Mixtral (every layer,
    where `sliding_window` is set). Empty: every layer sees every token."""
    window = raw.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return ()
    kind = str(raw.get("model_type", ""))
    types = raw.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        sliding = [t == "sliding_attention" for t in types]
    elif kind == "gemma2":
        sliding = [i % 2 == 0 for i in range(layers)]
    elif kind in ("gemma3", "gemma3_text"):
        pattern = int(raw.get("sliding_window_pattern") or 6)
        sliding = [(i + 1) % pattern != 0 for i in range(layers)]
    elif kind in ("mistral", "mixtral"):
        sliding = [True] * layers
    else:
        return ()
    return tuple(window if is_sliding else 0 for is_sliding in sliding) if any(sliding) else ()


def _attention_chunks(raw: dict[str, Any], layers: int) -> tuple[int, ...]:
    """Llama 4's chunked attention: `attention_chunk_size` on the layers that use RoPE (`layer_types` "chunked_attention",
    else `no_rope_layers` 1, else all but every `no_rope_layer_interval`-th, 4 by default); its NoPE layers see the whole
    context. Empty for any other family."""
    chunk = raw.get("attention_chunk_size")
    if not str(raw.get("model_type", "")).startswith("llama4") or not isinstance(chunk, int) or chunk <= 0:
        return ()
    types, rope = raw.get("layer_types"), raw.get("no_rope_layers")
    if isinstance(types, list) and len(types) == layers:
        chunked = [t == "chunked_attention" for t in types]
    elif isinstance(rope, list) and len(rope) == layers:
        chunked = [bool(r) for r in rope]
    else:
        interval = int(raw.get("no_rope_layer_interval") or 4)
        chunked = [(i + 1) % interval != 0 for i in range(layers)]
    return tuple(chunk if is_chunked else 0 for is_chunked in chunked) if any(chunked) else ()


def _moe_shape(raw: dict[str, Any], layers: int) -> dict[str, Any]:
    """An MoE's expert widths and which layers are MoE, from the keys each family uses: Mixtral and GPT-OSS
    (intermediate_size is the expert's width, every layer MoE), Qwen2/Qwen3-MoE (moe_intermediate_size, a shared expert
    of shared_expert_intermediate_size, decoder_sparse_step and mlp_only_layers), Llama 4 (intermediate_size for the
    routed and the shared expert, intermediate_size_mlp for the dense layers, moe_layers or interleave_moe_layer_step),
    DeepSeek-V2/V3 (n_shared_experts experts of moe_intermediate_size beside the routed ones; the first
    first_k_dense_replace layers dense at intermediate_size, then every moe_layer_freq-th layer MoE)."""
    if "intermediate_size_mlp" in raw:  # Llama 4
        step = int(raw.get("interleave_moe_layer_step") or 1)
        listed = raw.get("moe_layers")
        count = len(listed) if isinstance(listed, list) else sum(1 for i in range(layers) if (i + 1) % step == 0)
        return {"expert_intermediate_size": int(raw["intermediate_size"]), "moe_layers": count,
                "shared_expert_intermediate_size": int(raw["intermediate_size"]),
                "dense_intermediate_size": int(raw["intermediate_size_mlp"])}
    if "first_k_dense_replace" in raw or "n_shared_experts" in raw:  # DeepSeek-V2/V3, Kimi K2
        first, every = int(raw.get("first_k_dense_replace") or 0), int(raw.get("moe_layer_freq") or 1)
        count = sum(1 for i in range(layers) if i >= first and i % every == 0)
        shared = int(raw.get("n_shared_experts") or 0) * int(raw["moe_intermediate_size"])
        return {"expert_intermediate_size": int(raw["moe_intermediate_size"]), "moe_layers": count,
                "shared_expert_intermediate_size": shared}
    if raw.get("moe_intermediate_size"):  # Qwen2-MoE, Qwen3-MoE
        step = int(raw.get("decoder_sparse_step") or 1)
        dense = set(raw.get("mlp_only_layers") or [])
        count = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
        shared = int(raw.get("shared_expert_intermediate_size") or 0)
        return {"expert_intermediate_size": int(raw["moe_intermediate_size"]), "moe_layers": count,
                "shared_expert_intermediate_size": shared, "shared_expert_gate": bool(shared)}
    return {}


def check_tp(model: ModelSpec, tp: int) -> None:
    """Refuse a TP size that does not split the attention heads (and KV heads) evenly."""
    if tp < 1 or model.num_heads % tp:
        options = [n for n in (1, 2, 4, 8, 16) if model.num_heads % n == 0]
        raise InvalidInputError(
            f"--tp {tp} does not divide the model's {model.num_heads} attention heads.",
            hint=f"Use --tp {' or '.join(map(str, options))}.",
        )
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise InvalidInputError(
            f"--tp {tp} neither divides nor is a multiple of the model's {model.num_kv_heads} KV heads.",
            hint="Pick a TP size that divides the KV heads, or a multiple of them (KV heads are then replicated).",
        )


def check_attention_dp_backend(backend: str) -> None:
    """Refuse attention data parallelism on a backend that has none (trtllm-build engines)."""
    if backend != "pytorch":
        raise UnsupportedError("Attention data parallelism is an option of TensorRT-LLM's PyTorch backend "
                               "(enable_attention_dp); a trtllm-build engine splits attention by TP.",
                               hint="Add --backend pytorch, or drop --attention-dp.")


def check_attention_dp(model: ModelSpec, tp: int) -> None:
    """Refuse attention data parallelism where it has no experts to spread, or cannot spread them evenly over tp GPUs."""
    if not model.moe_layer_count:
        raise InvalidInputError(f"--attention-dp spreads an MoE's experts over the GPUs; {model.name} has none.",
                                hint="Drop --attention-dp: a dense model is split with --tp.")
    if tp < 2 or model.num_experts % tp:
        raise InvalidInputError(
            f"--attention-dp with --tp {tp}: the {model.num_experts} experts of {model.name} are spread over the tp GPUs, "
            "so tp must be at least 2 and divide them.",
            hint=f"Use --tp {' or '.join(str(n) for n in (2, 4, 8) if model.num_experts % n == 0) or 'N (a divisor)'}.")

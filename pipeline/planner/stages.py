"""Pipeline parallelism: what one of `pp` stages holds, and how long its hand-over to the next takes.

As TensorRT-LLM runs it:
- the decoder layers are split over the stages in order, the first (layers mod pp) stages taking one layer more
  (tensorrt_llm/mapping.py @b35ac1b6 Mapping.pp_layers, torch.tensor_split); the first stage also holds the embedding,
  the last the final norm and the lm_head;
- each stage sends the next its hidden states and residual, two 16-bit tensors of tokens x hidden
  (tensorrt_llm/_torch/models/modeling_utils.py @cb4c622c forward_before_send);
- pp micro-batches are in flight at once, each of up to max_batch_size requests and max_num_tokens tokens, so a stage
  works on one while the others are on the other stages (tensorrt_llm/_torch/pyexecutor/py_executor.py @9521caf4:
  num_micro_batches = pp_size, _executor_loop_pp; _util.py @d8ae02ca: the capacity scheduler admits
  max_batch_size x pp_size requests, the micro-batch scheduler max_batch_size and max_num_tokens per micro-batch).

The planner times the fullest stage, the first ceil(layers / pp) layers with one 16-bit table and the lm_head's math (so
never less than the first or the last stage), and lets every stage take that long: one micro-batch's iteration is pp of
them in a row, and the pp micro-batches keep every stage busy. Each stage holds every request's KV cache for its own
layers, so the pipeline holds as many sequences as the fullest stage's memory does.
"""

from __future__ import annotations

import math
from functools import lru_cache

from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import GpuSpec
from pipeline.planner.rates import ALLREDUCE_EFFICIENCY, hop_link, link_domain
from pipeline.planner.shapes import ModelSpec

SENT_TENSORS = 2  # hidden states and residual
SENT_BYTES_PER_ELEMENT = 2  # 16-bit activations


@lru_cache(maxsize=256)
def pipeline_stage(model: ModelSpec, pp: int) -> ModelSpec:
    """The fullest of `pp` stages as a model of its own: the first ceil(layers / pp) layers (their share of MoE layers,
    their sliding windows and attention chunks, their share of the layers a checkpoint keeps 16-bit) and one 16-bit table
    (counted as a tied embedding: read as the embedding, multiplied through as the lm_head)."""
    if pp == 1:
        return model
    layers = math.ceil(model.num_layers / pp)
    moe_layers = None if model.moe_layers is None else math.ceil(model.moe_layers * layers / model.num_layers)
    return model.model_copy(update={
        "num_layers": layers, "moe_layers": moe_layers, "tie_word_embeddings": True,
        "sliding_windows": model.sliding_windows[:layers], "attention_chunks": model.attention_chunks[:layers],
        "sixteen_bit_params": round(model.sixteen_bit_params * layers / model.num_layers),
    })


def check_pp(model: ModelSpec, pp: int) -> None:
    """Refuse a pipeline that has no layer for some stage."""
    if pp < 1 or pp > model.num_layers:
        raise InvalidInputError(f"--pp {pp}: {model.name} has {model.num_layers} decoder layers to split over the stages.",
                                hint=f"Use --pp between 1 and {model.num_layers} (2, 4 or 8 on one node).")


def stage_send_s(model: ModelSpec, gpu: GpuSpec, tokens: float, *, across_nodes: bool = False) -> float:
    """Seconds for one stage to hand `tokens` tokens' hidden states and residual to the next: over NVLink or PCIe within
    the sender's node (a GB200's within its NVLink rack), over the NIC across nodes."""
    if not tokens:
        return 0.0
    bandwidth, latency = hop_link(gpu, across_nodes=across_nodes)
    sent = SENT_TENSORS * tokens * model.hidden_size * SENT_BYTES_PER_ELEMENT
    return latency + sent / (bandwidth * ALLREDUCE_EFFICIENCY)


def handovers_s(model: ModelSpec, gpu: GpuSpec, tp: int, pp: int, tokens: float) -> float:
    """Seconds for one micro-batch's pp-1 hand-overs. Ranks fill the nodes in order, each stage's tp of them together
    (mapping.py @05ebebb2: pp_rank = rank // tp, next_pp_rank = rank + tp), so only a hop whose ranks sit in two nodes
    (or NVLink domains) goes over the NIC: at TP4 x PP4 on 8-GPU nodes, one of the three."""
    domain = link_domain(gpu)
    total = 0.0
    for stage in range(pp - 1):
        ranks = range(stage * tp, (stage + 1) * tp)
        across = any(rank // domain != (rank + tp) // domain for rank in ranks)
        total += stage_send_s(model, gpu, tokens, across_nodes=across)
    return total

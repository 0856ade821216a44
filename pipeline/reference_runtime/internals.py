"""The transformers internals the reference runtime relies on, checked when the engine starts.

The runtime drives transformers' continuous batching through names that are not public API: it replaces the
model's `_get_logits_processor` (read by the batching manager when it is made), sets the manager's
`logit_processor.tensors_required`, reads each request's `state.logit_processor_kwargs` (sampling.py), reads
the KV cache's `compute_free_capacity` through `manager.batch_processor.cache` (the KV-blocks metric, and every
wait for an idle engine), and swaps `ALL_ATTENTION_FUNCTIONS["sdpa"]` for its own (attention.py). For LoRA (lora_apply.py) it reads the
step's `batch_processor.inputs_and_outputs.requests_in_batch` beside the forward's `cu_seq_lens_q` (looked up when
the first adapted step runs: the attribute exists only once the manager runs). Should a
transformers release rename one of them, the runtime would not fail: it would sample greedily, or report no KV
block in use. So each is looked up here before the model loads (and the manager's once it exists), and a
missing one stops the engine with an error that names it. pyproject.toml pins transformers to the minor
release these were read from (TESTED_TRANSFORMERS), so an upgrade is a decision, made with this list at hand.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# The transformers minor release these names were read from (site-packages/transformers at 5.24.0:
# generation/continuous_batching/continuous_api.py, cache.py, requests.py, cb_logits_processors.py).
TESTED_TRANSFORMERS = "5.24"


class TransformersInternalsError(RuntimeError):
    """A transformers internal the reference runtime needs is missing (renamed or removed)."""


def _missing(name: str) -> TransformersInternalsError:
    import transformers

    return TransformersInternalsError(
        f"transformers {transformers.__version__} has no {name}, which the reference runtime uses (tested with "
        f"transformers {TESTED_TRANSFORMERS}.x); install that release (pyproject.toml pins it), or port "
        "pipeline/reference_runtime to the new name.")


def require(owner: Any, attribute: str, where: str) -> Any:
    """owner.attribute; TransformersInternalsError naming `where.attribute` when it is missing."""
    if not hasattr(owner, attribute):
        raise _missing(f"{where}.{attribute}")
    return getattr(owner, attribute)


def check_before_load() -> None:
    """The names the runtime uses before and while the batching manager is made."""
    from transformers import modeling_utils
    from transformers.generation.continuous_batching import cache, requests
    from transformers.generation.utils import GenerationMixin
    from transformers.integrations import sdpa_attention

    require(GenerationMixin, "_get_logits_processor", "GenerationMixin")
    attention = require(modeling_utils, "ALL_ATTENTION_FUNCTIONS", "transformers.modeling_utils")
    if "sdpa" not in attention:
        raise _missing('ALL_ATTENTION_FUNCTIONS["sdpa"]')
    require(sdpa_attention, "sdpa_attention_forward", "transformers.integrations.sdpa_attention")
    require(cache.PagedAttentionCache, "compute_free_capacity", "PagedAttentionCache")
    state = require(requests, "RequestState", "transformers.generation.continuous_batching.requests")
    if "logit_processor_kwargs" not in {item.name for item in dataclasses.fields(state)}:
        raise _missing("RequestState.logit_processor_kwargs")


def check_manager(manager: Any) -> None:
    """The batching manager's attributes the engine sets or reads (`batch_processor` is None until it runs)."""
    processor = require(manager, "logit_processor", "ContinuousBatchingManager")
    require(processor, "tensors_required", "ContinuousBatchingManager.logit_processor")
    require(manager, "batch_processor", "ContinuousBatchingManager")

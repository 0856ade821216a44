"""Per-request sampling for transformers' continuous batching manager.

The manager's own per-request processors cover temperature/top_k/top_p only, and seed, min_tokens,
bad words and log-probs are global there. So the reference runtime installs ONE continuous-batching
logits processor, `RequestSampler`, that picks each request's next token itself (its own
torch.Generator per request: `seed` is honoured per request) and hands the manager a one-hot score
row, which the manager's multinomial step then returns unchanged. Scheduling, batching and the
paged KV cache stay the manager's.

Token choice, per request, following the TensorRT-LLM sampling contract:
  - bad words: the last token of a bad word is masked when the tokens before it match the word's prefix;
  - min_tokens: end ids are masked until min_tokens tokens were generated;
  - greedy when runtime_top_k == 1, or when top_k == 0 and top_p == 0 (the TensorRT-LLM default);
    otherwise logits / temperature, then top-k (0 = off), then top-p (0 = off), then a draw;
  - log-probs: log-softmax of the temperature-scaled logits after bad-word/min-token masking, taken at
    the chosen token (the same numbers for greedy and sampled requests).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch
from transformers.generation.continuous_batching.cb_logits_processors import ContinuousBatchingLogitsProcessor


@dataclass
class SamplingOptions:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 0.0
    seed: int | None = None
    min_tokens: int = 0
    end_ids: tuple[int, ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()

    @property
    def greedy(self) -> bool:
        return self.top_k == 1 or (self.top_k <= 0 and self.top_p <= 0.0) or self.temperature <= 0.0


@dataclass
class SlotState:
    options: SamplingOptions
    context_tail: list[int]
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class RequestSampler(ContinuousBatchingLogitsProcessor):
    """Chooses every request's next token; see the module docstring."""

    supported_kwargs: dict[str, type] = {"slot": int}
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._slots: dict[int, SlotState] = {}
        self._lock = threading.Lock()
        self._next = 0

    # -- bookkeeping, called from request threads -----------------------------------------------
    def register(self, options: SamplingOptions, prompt_ids: list[int]) -> int:
        generator = None
        if not options.greedy:
            generator = torch.Generator(device="cpu")
            if options.seed is not None:
                generator.manual_seed(int(options.seed) & 0xFFFF_FFFF_FFFF_FFFF)
            else:
                generator.seed()
        longest_bad = max((len(w) for w in options.bad_words), default=1)
        with self._lock:
            self._next = (self._next + 1) % 2_000_000_000
            slot = self._next
            self._slots[slot] = SlotState(options, list(prompt_ids[-longest_bad:]), generator)
        return slot

    def release(self, slot: int) -> None:
        with self._lock:
            self._slots.pop(slot, None)

    def state(self, slot: int) -> SlotState | None:
        return self._slots.get(slot)

    def choose(self, slot: int, logits: torch.Tensor) -> int:
        """The next token of the request in `slot` from its logits row (recorded as __call__ records it): the
        speculative engine calls it once per position it verifies."""
        return self._choose(logits.float(), self._slots.get(slot))

    # -- ContinuousBatchingLogitsProcessor ------------------------------------------------------
    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        int32_tensor.fill_(-1)

    def prepare_tensor_args(self, requests_with_new_token) -> torch.Tensor:
        slots = [int(r.state.logit_processor_kwargs.get("slot", -1)) for r in requests_with_new_token]
        return torch.tensor(slots, dtype=torch.int32, device="cpu")

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        rows = scores.size(0)
        slots = tensor_arg[:rows].tolist()
        chosen = torch.empty(rows, dtype=torch.long)
        for row, slot in enumerate(slots):
            state = self._slots.get(slot)
            chosen[row] = self._choose(scores[row].float(), state)
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot.scatter_(1, chosen.unsqueeze(1).to(scores.device), 0.0)
        return one_hot

    def _choose(self, logits: torch.Tensor, state: SlotState | None) -> int:
        if state is None:  # not ours (should not happen): plain greedy
            return int(torch.argmax(logits))
        opts = state.options
        logits = logits.clone()
        history = state.context_tail + state.tokens[-32:] if opts.bad_words else []
        for word in opts.bad_words:
            prefix = list(word[:-1])
            if not prefix or (len(history) >= len(prefix) and history[-len(prefix):] == prefix):
                logits[word[-1]] = float("-inf")
        if opts.min_tokens and len(state.tokens) < opts.min_tokens:
            for end_id in opts.end_ids:
                if 0 <= end_id < logits.numel():
                    logits[end_id] = float("-inf")
        temperature = opts.temperature if opts.temperature > 0 else 1.0
        scaled = logits / temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        if opts.greedy:
            token = int(torch.argmax(scaled))
        else:
            filtered = scaled
            if opts.top_k > 0:
                k = min(opts.top_k, filtered.numel())
                threshold = torch.topk(filtered, k).values[-1]
                filtered = filtered.masked_fill(filtered < threshold, float("-inf"))
            if 0.0 < opts.top_p < 1.0:
                sorted_logits, order = torch.sort(filtered, descending=True)
                cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
                drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= opts.top_p
                drop[0] = False
                filtered = filtered.scatter(0, order, sorted_logits.masked_fill(drop, float("-inf")))
            probs = torch.softmax(filtered, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=state.generator))
        state.tokens.append(token)
        state.logprobs.append(float(logprobs[token]))
        return token

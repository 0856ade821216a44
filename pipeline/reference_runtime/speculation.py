"""Speculative decoding on the CPU: draft-target and n-gram (prompt lookup) with greedy acceptance.

An engine folder built with speculation records it in config.json under build_config["speculative"]
({"method", "max_draft_len", "max_matching_ngram_size", "draft_dir"}, the contract of issue #24).
`SpeculativeEngine` then serves the `tensorrt_llm` model instead of ReferenceEngine, with the same
public interface (validate, submit, cancel, stats, close). Each step of a request feeds the target
the tokens it has not seen plus up to max_draft_len draft tokens in ONE forward pass, then walks the
positions in order: the request's own sampler (sampling.RequestSampler, the same code the batching
engine uses) picks the token at each position; a draft token is accepted while it equals that pick,
and the first pick that differs (or the one after the last draft) is the step's extra token. Every
emitted token is the target's own choice given the tokens before it, so the output is the output
without speculation, token for token (greedy), and a seeded sampled request draws the same numbers in
the same order. The target's KV cache is cut back to the accepted tokens after each step.

Drafts come from (in this order): the request's `draft_input_ids` (verified at its first step, as
TensorRT-LLM verifies external draft tokens in the context step), then the engine's own method:
- draft-target: the draft engine at <engine>/<draft_dir> (a reference folder: its config.json and
  model/) proposes greedily, with a KV cache of its own per request, cut back as the target's;
- ngram: prompt lookup, as TensorRT-LLM's NGram drafter: the last n tokens of the sequence
  (n = max_matching_ngram_size down to 1) are looked up earlier in prompt + output, and the tokens that
  followed their OLDEST occurrence are the draft (NGramDecodingConfig.is_use_oldest=True, the default).
`draft_logits` and `draft_acceptance_threshold` are accepted (NVIDIA's tensors) and do not change the
choice: acceptance here is by the target's own choice, never by probability ratios.

Requests run one step at a time in turn (round robin over up to max_batch_size requests) on one worker
thread, each with its own transformers DynamicCache: speculation trades batch for depth, the regime
where it pays. The counters reported with return_perf_metrics are TensorRT-LLM's
(SpeculativeDecodingMetrics: totalDraftTokens, totalAcceptedDraftTokens, acceptanceRate).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.reference_runtime.kv_cache import Admission, blocks_for
from pipeline.reference_runtime.requests import (Callback, EngineLimits, GenerationEvent, GenerationRequest,
                                                 RequestError, RuntimeStats, check_request)
from pipeline.reference_runtime.sampling import RequestSampler, SamplingOptions
from pipeline.reference_runtime.words import ends_with_any

LOG = logging.getLogger("pipeline.reference_runtime")
METHODS = ("draft-target", "ngram")  # what the CPU runtime implements (lookahead and EAGLE-3 are GPU paths)


class SpeculationError(ValueError):
    """An engine folder whose speculation the reference runtime cannot serve."""


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    max_draft_len: int
    max_matching_ngram_size: int = 0
    draft_dir: Path | None = None  # absolute, resolved against the engine folder

    @classmethod
    def from_engine_config(cls, engine_config: dict, engine_dir: Path) -> "SpeculativeConfig | None":
        """The folder's build_config["speculative"] record, checked; None when it was built without speculation."""
        record = (engine_config.get("build_config") or {}).get("speculative")
        if not record:
            return None
        method = str(record.get("method", ""))
        if method not in METHODS:
            raise SpeculationError(f"speculative method {method!r} is not implemented by the reference runtime (CPU), "
                                   f"which runs {' and '.join(METHODS)}; lookahead and eagle3 run on a GPU")
        max_draft_len = int(record.get("max_draft_len") or 0)
        if max_draft_len < 1:
            raise SpeculationError(f"speculative max_draft_len must be at least 1, got {max_draft_len}")
        ngram = int(record.get("max_matching_ngram_size") or 0)
        if method == "ngram" and ngram < 1:
            raise SpeculationError(f"ngram speculation needs max_matching_ngram_size >= 1, got {ngram}")
        draft_dir = None
        if method == "draft-target":
            draft_dir = (Path(engine_dir) / str(record.get("draft_dir") or "draft")).resolve()
            if not (draft_dir / "config.json").is_file() or not (draft_dir / "model").is_dir():
                raise SpeculationError(f"draft-target speculation: {draft_dir} is not a reference engine folder "
                                       "(config.json and model/); build the target with its draft")
        return cls(method, max_draft_len, ngram, draft_dir)


def ngram_draft(tokens: list[int], max_ngram: int, k: int) -> list[int]:
    """Prompt lookup: the up to k tokens that followed the oldest earlier occurrence of the sequence's last n tokens,
    for the longest n <= max_ngram that occurs; [] when none does."""
    if k < 1:
        return []
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        tail = tokens[-n:]
        for start in range(0, len(tokens) - n):
            if tokens[start:start + n] == tail:
                follow = tokens[start + n:start + n + k]
                if follow:
                    return follow
    return []


def load_model(model_dir: Path, simulated_quant: tuple[str, str] = ("fp16", "auto")):
    """The HF model of a reference folder in fp32, or in its simulated precision (as ReferenceEngine loads it)."""
    import torch
    from transformers import AutoModelForCausalLM

    quant, kv_cache = simulated_quant
    if quant == "fp16" and kv_cache == "auto":
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), attn_implementation="sdpa", dtype=torch.float32,
                                                     trust_remote_code=False)
    else:
        from pipeline.quantization.simulated import load_reference_model

        model, _ = load_reference_model(model_dir, quant, kv_cache, calib_size=16)
    return model.eval()


class _Stepper:
    """One model with one request's KV cache: feeds tokens, and cuts the cache back to what still holds."""

    def __init__(self, model) -> None:
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.held: list[int] = []  # the tokens the cache holds, in order

    @property
    def seen(self) -> int:
        return len(self.held)

    def feed_after(self, sequence: list[int], extra: list[int] = ()):
        """Logits [n, vocab] for the tokens of `sequence` + `extra` the cache does not hold yet. The cache keeps the
        longest prefix it shares with `sequence`, less one token at least (something must be fed)."""
        import torch

        common = 0
        limit = min(len(self.held), len(sequence) - 1)
        while common < limit and self.held[common] == sequence[common]:
            common += 1
        self.keep(common)
        tokens = list(sequence[common:]) + list(extra)
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([tokens]), past_key_values=self.cache, use_cache=True)
        self.held += tokens
        return out.logits[0]

    def keep(self, length: int) -> None:
        if length < len(self.held):
            self.cache.crop(length - len(self.held))  # transformers 5.24: a negative count of tokens to drop
            del self.held[length:]


class DraftModel:
    """The draft engine of a draft-target build: proposes k tokens greedily, continuing each request's sequence."""

    def __init__(self, draft_dir: Path) -> None:
        config = json.loads((draft_dir / "config.json").read_text(encoding="utf-8"))
        simulated = config.get("pretrained_config", {}).get("quantization", {}).get("simulated") or {}
        self.model = load_model(draft_dir / "model", (simulated.get("quant", "fp16"), simulated.get("kv_cache", "auto")))

    def propose(self, stepper: _Stepper, sequence: list[int], k: int) -> list[int]:
        import torch

        draft = [int(torch.argmax(stepper.feed_after(sequence)[-1]))]
        while len(draft) < k:
            draft.append(int(torch.argmax(stepper.feed_after(sequence + draft)[-1])))
        return draft


@dataclass
class _Request:
    request_id: str
    request: GenerationRequest
    callback: Callback
    slot: int
    is_cancelled: Callable[[], bool] | None
    end_ids: tuple[int, ...]
    target: _Stepper
    draft: _Stepper | None
    arrival_ns: int
    tokens: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    first_scheduled_ns: int = 0
    first_token_ns: int = 0
    cancelled: bool = False
    done: bool = False


class SpeculativeEngine:
    """The reference runtime's engine for a folder built with speculation (see the module docstring)."""

    def __init__(self, model_dir: Path, limits: EngineLimits, spec: SpeculativeConfig, *,
                 simulated_quant: tuple[str, str] = ("fp16", "auto")) -> None:
        import torch

        from pipeline.reference_runtime.engine import ReferenceEngine, intra_op_threads

        torch.set_num_threads(intra_op_threads())
        self.limits, self.spec = limits, spec
        self.sampler = RequestSampler()
        self.model = load_model(model_dir, simulated_quant)
        eos = self.model.generation_config.eos_token_id
        self.default_end_id = eos[0] if isinstance(eos, (list, tuple)) and eos else (eos if isinstance(eos, int) else None)
        self.kv_plan = ReferenceEngine._plan_kv_cache(self.model, limits)
        self.draft_model = DraftModel(spec.draft_dir) if spec.method == "draft-target" else None
        if self.draft_model is not None and self.draft_model.model.config.vocab_size != self.model.config.vocab_size:
            raise SpeculationError(f"the draft's vocabulary ({self.draft_model.model.config.vocab_size} tokens) differs "
                                   f"from the target's ({self.model.config.vocab_size}): a draft must share the tokenizer")
        self._admission = Admission(total_blocks=self.kv_plan.blocks, max_active=limits.max_batch_size,
                                    policy=limits.scheduler_policy, batching=limits.batching)
        self._requests: dict[str, _Request] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._ids = itertools.count()
        self._finished = 0
        self._running = True
        LOG.info("speculative decoding: %s, up to %d draft tokens per step%s; greedy acceptance, requests stepped in "
                 "turn (up to %d at once)", spec.method, spec.max_draft_len,
                 f", n-grams up to {spec.max_matching_ngram_size}" if spec.method == "ngram" else f", draft {spec.draft_dir}",
                 limits.max_batch_size)
        self._worker = threading.Thread(target=self._loop, name="reference-speculative", daemon=True)
        self._worker.start()

    # -- public (ReferenceEngine's interface) --------------------------------------------------------
    def validate(self, request: GenerationRequest) -> None:
        check_request(request, self.limits, self.kv_plan)

    def submit(self, request: GenerationRequest, callback: Callback, *,
               is_cancelled: Callable[[], bool] | None = None) -> str:
        self.validate(request)
        if not self._running:
            raise RequestError("The reference runtime is shutting down and accepts no new requests.")
        room = self.limits.max_input_len - len(request.input_ids)
        if len(request.draft_tokens) > room:  # TensorRT-LLM cuts the draft to fit max_input_len (LlmRequest::validate)
            LOG.warning("prompt + draft tokens (%d + %d) exceed max_input_len %d: the draft is cut to %d tokens",
                        len(request.input_ids), len(request.draft_tokens), self.limits.max_input_len, room)
            request.draft_tokens = request.draft_tokens[:room]
        end_id = self.default_end_id if request.end_id is None else request.end_id
        end_ids = () if end_id is None or end_id < 0 else (int(end_id),)
        request_id = f"spec-{next(self._ids)}"
        with self._lock:
            if self.limits.max_queue_size and self._admission.waiting >= self.limits.max_queue_size:
                raise RequestError(f"The reference runtime's queue is full (max_queue_size {self.limits.max_queue_size})"
                                   ". Retry later.")
            slot = self.sampler.register(SamplingOptions(**{**request.sampling.__dict__, "end_ids": end_ids}),
                                         request.input_ids)
            draft = _Stepper(self.draft_model.model) if self.draft_model is not None else None
            self._requests[request_id] = _Request(request_id, request, callback, slot, is_cancelled, end_ids,
                                                  _Stepper(self.model), draft, time.time_ns())
            self._admission.queue(request_id, blocks_for(len(request.input_ids) + request.max_new_tokens,
                                                         self.kv_plan.tokens_per_block))
        self._wake.set()
        return request_id

    def cancel(self, request_id: str) -> bool:
        state = self._requests.get(request_id)
        if state is None or state.done:
            return False
        state.cancelled = True  # the worker ends it before its next step
        self._wake.set()
        return True

    def active_count(self) -> int:
        return len(self._requests)

    def stats(self) -> RuntimeStats:
        with self._lock:
            used = sum(blocks_for(r.target.seen, self.kv_plan.tokens_per_block) for r in self._requests.values()
                       if r.target.seen)
            return RuntimeStats(active=self._admission.active, waiting=self._admission.waiting,
                                max_active=self.limits.max_batch_size, kv_blocks_max=self.kv_plan.blocks,
                                kv_blocks_used=min(used, self.kv_plan.blocks),
                                kv_blocks_reserved=self._admission.reserved_blocks,
                                tokens_per_block=self.kv_plan.tokens_per_block, finished=self._finished)

    def close(self) -> None:
        self._running = False
        for state in list(self._requests.values()):
            state.cancelled = True
        self._wake.set()
        self._worker.join(timeout=10)
        for state in list(self._requests.values()):
            self._finish(state, "cancelled")

    # -- the worker ----------------------------------------------------------------------------------
    def _loop(self) -> None:
        started: list[str] = []
        period = max(0.001, self.limits.cancellation_check_period_ms / 1000.0)
        while self._running:
            with self._lock:
                started += self._admission.ready()
            started = [rid for rid in started if rid in self._requests]
            if not started:
                self._wake.wait(period)
                self._wake.clear()
                continue
            for request_id in list(started):
                state = self._requests.get(request_id)
                if state is None or not self._running:
                    continue
                try:
                    self._step_or_end(state)
                except Exception as failure:  # noqa: BLE001 - one request's failure ends that request only
                    LOG.exception("speculative step of %s failed", request_id)
                    self._finish(state, "error", error=f"The reference runtime failed: {failure}")

    def _step_or_end(self, state: _Request) -> None:
        if state.cancelled or self._probe_cancelled(state):
            self._finish(state, "cancelled")
            return
        if not state.first_scheduled_ns:
            state.first_scheduled_ns = time.time_ns()
        new, reason = self._step(state)
        if new and not state.first_token_ns:
            state.first_token_ns = time.time_ns()
        if reason is not None:
            self._finish(state, reason, new)
        elif new and state.request.streaming:
            state.callback(self._event(state, new, False, None))

    def _probe_cancelled(self, state: _Request) -> bool:
        try:
            return bool(state.is_cancelled()) if state.is_cancelled is not None else False
        except Exception:  # noqa: BLE001
            LOG.exception("cancellation probe failed")
            return False

    def _drafts(self, state: _Request, sequence: list[int], remaining: int) -> list[int]:
        k = min(self.spec.max_draft_len, remaining - 1)
        if not state.tokens:  # the context step: only the client's draft_input_ids
            return list(state.request.draft_tokens[:max(0, remaining - 1)])
        if k < 1:
            return []
        if state.draft is not None:
            return self.draft_model.propose(state.draft, sequence, k)
        return ngram_draft(sequence, self.spec.max_matching_ngram_size, k)

    def _step(self, state: _Request) -> tuple[list[int], str | None]:
        """One target pass over the unseen tokens and the drafts; returns the emitted tokens and the end reason."""
        sequence = state.request.input_ids + state.tokens
        remaining = state.request.max_new_tokens - len(state.tokens)
        drafts = self._drafts(state, sequence, remaining)
        target = state.target
        logits = target.feed_after(sequence, drafts)[-(len(drafts) + 1):]
        emitted: list[int] = []
        reason = None
        for position in range(len(drafts) + 1):
            token = self.sampler.choose(state.slot, logits[position])
            if token in state.end_ids:
                reason = "end_id"
                break
            emitted.append(token)
            state.tokens.append(token)
            if state.request.stop_words and ends_with_any(state.tokens, state.request.stop_words):
                reason = "stop_word"
                break
            if len(state.tokens) >= state.request.max_new_tokens:
                reason = "length"
                break
            if position == len(drafts) or token != drafts[position]:
                break
        accepted = next((i for i, (a, b) in enumerate(zip(emitted, drafts)) if a != b), min(len(emitted), len(drafts)))
        state.drafted += len(drafts)
        state.accepted += accepted
        target.keep(len(sequence) + accepted)  # the drafts it confirmed stay; the extra token is fed next step
        return emitted, reason

    # -- results -------------------------------------------------------------------------------------
    def _event(self, state: _Request, new, finished, reason, error=None) -> GenerationEvent:
        slot = self.sampler.state(state.slot)
        logprobs = list(slot.logprobs[:len(state.tokens)]) if slot and state.request.return_log_probs else []
        timings = {"arrival_time_ns": state.arrival_ns, "first_scheduled_time_ns": state.first_scheduled_ns,
                   "first_token_time_ns": state.first_token_ns,
                   "last_token_time_ns": time.time_ns() if state.tokens else 0}
        return GenerationEvent(list(new), list(state.tokens), logprobs, finished, reason, error, timings,
                               total_draft_tokens=state.drafted, total_accepted_draft_tokens=state.accepted)

    def _finish(self, state: _Request, reason, new=(), error=None) -> None:
        with self._lock:
            if state.done:
                return
            state.done = True
        try:
            state.callback(self._event(state, new, True, reason, error))
        except Exception:  # noqa: BLE001
            LOG.exception("final callback of %s failed", state.request_id)
        with self._lock:
            self._requests.pop(state.request_id, None)
            self._finished += 1
            if not self._admission.drop(state.request_id):
                self._admission.release(state.request_id)
        self.sampler.release(state.slot)
        if state.drafted:
            LOG.info("request %s ended (%s): %d tokens, %d of %d draft tokens accepted", state.request_id, reason,
                     len(state.tokens), state.accepted, state.drafted)
        self._wake.set()

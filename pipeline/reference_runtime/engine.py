"""ReferenceEngine: one transformers continuous-batching manager shared by every request of the
`tensorrt_llm` model instance, plus the TensorRT-LLM request semantics the manager lacks.

The manager batches (in-flight) and owns the paged KV cache. This class adds: the cache size from
a budget and admission by TensorRT-LLM's scheduler policies (kv_cache.py: a request waits in a FIFO
queue until a batch slot, and under guaranteed_no_evict the KV blocks for its whole length, are
free), validation against the engine limits (requests.py, with the request and event types),
per-request sampling (sampling.RequestSampler), end ids, stop words (the request is cancelled in the
manager as soon as its output ends with one, which frees its KV blocks), cancellation, log-probs,
the perf-metric timestamps and the runtime's own counters (stats(): slots, queue, KV blocks).
Results reach the caller through a callback per request, called from one dispatcher thread.
Every thread it runs is a daemon, the manager's included, and close() cancels what runs: a finalized
stub's interpreter, which waits at exit for threads that are not daemons, is never kept alive by them.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.core.processes import start_as_daemons
from pipeline.reference_runtime.attention import install as install_per_request_attention
from pipeline.reference_runtime.internals import check_before_load, check_manager
from pipeline.reference_runtime.lora_apply import LoraRuntime, LoraSettings
from pipeline.reference_runtime.kv_cache import (Admission, KvCacheBudget, KvCacheError, KvCachePlan, blocks_for,
                                                 kv_bytes_per_token, plan_kv_cache)
from pipeline.reference_runtime.requests import (Callback, EngineLimits, GenerationEvent, GenerationRequest,
                                                 RequestError, RuntimeStats, check_request)
from pipeline.reference_runtime.sampling import RequestSampler, SamplingOptions
from pipeline.reference_runtime.words import ends_with_any

LOG = logging.getLogger("pipeline.reference_runtime")
# Calibration texts for a simulated precision at model load: enough for stable activation ranges on
# a small model, few enough that the server starts in seconds (convert uses 64 by default).
SIMULATION_CALIB_SIZE = 16


@dataclass
class _Active:
    request_id: str
    request: GenerationRequest
    callback: Callback
    slot: int
    is_cancelled: Callable[[], bool] | None
    arrival_ns: int
    blocks: int  # KV blocks of its worst case (prompt + max_new_tokens)
    end_ids: tuple[int, ...] = ()
    started: bool = False  # handed to the batching manager (else waiting in the admission queue)
    seen: int = 0
    tokens: list[int] = field(default_factory=list)
    first_token_ns: int = 0
    done: bool = False
    # Held while anything touches the request's response sender: Triton deletes the response factory once
    # the final response is sent, and is_cancelled() on a deleted factory crashes tritonserver (2.51).
    lock: threading.RLock = field(default_factory=threading.RLock)


class ReferenceEngine:
    def __init__(
        self,
        model_dir: Path,
        limits: EngineLimits,
        *,
        default_end_id: int | None = None,
        simulated_quant: tuple[str, str] = ("fp16", "auto"),
        lora: LoraSettings | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig
        from transformers.generation.logits_process import LogitsProcessorList

        check_before_load()  # the transformers internals used below: a missing one fails here, by name
        self.limits = limits
        self.sampler = RequestSampler()
        torch.set_num_threads(intra_op_threads())
        # Continuous batching runs attention over the whole batch at once with a block-diagonal mask; with a mask,
        # transformers' sdpa path copies K/V for every query head (repeat_kv) unless told that torch's own GQA
        # handles masks, as it does on the CPU. Same numbers, about half the attention time of a decode step
        # (scripts/bench_runtime.py). Read at every call, in this process only (the Triton stub of this model).
        os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")
        install_per_request_attention()  # a step prefilling several prompts: each attends to its own keys only
        # "sdpa": transformers 5.24 switches it to its paged form itself and warns that the
        # "paged|sdpa" spelling is deprecated.
        quant, kv_cache = simulated_quant
        if quant == "fp16" and kv_cache == "auto":
            model = AutoModelForCausalLM.from_pretrained(str(model_dir), attn_implementation="sdpa", dtype=torch.float32,
                                                         trust_remote_code=False)
        else:  # the precision the engine was built for, as ModelOpt fake quantization (fp32 compute)
            from pipeline.quantization.simulated import load_reference_model

            started = time.monotonic()
            model, _ = load_reference_model(model_dir, quant, kv_cache, calib_size=SIMULATION_CALIB_SIZE)
            LOG.info("reference runtime: %s (KV %s) simulated with ModelOpt fake quantization, calibrated on %d texts "
                     "in %.1f s", quant, kv_cache, SIMULATION_CALIB_SIZE, time.monotonic() - started)
        self.default_end_id = default_end_id if default_end_id is not None else _first(model.generation_config.eos_token_id)
        model._get_logits_processor = lambda _config: LogitsProcessorList([self.sampler])  # our sampler, their scheduler
        self.kv_plan = self._plan_kv_cache(model, limits)
        cb_config = ContinuousBatchingConfig(
            page_size=limits.tokens_per_block,
            num_blocks=self.kv_plan.blocks,
            max_batch_tokens=limits.max_num_tokens,
            max_requests_per_batch=limits.max_batch_size,
            allow_block_sharing=limits.enable_kv_cache_reuse,
            use_cuda_graph=False,
            use_async_batching=False,
            max_queue_size=0,  # requests reach the manager only when admitted (self._admission), never to wait there
        )
        generation_config = GenerationConfig(
            do_sample=False,  # the sampler hands over one-hot rows: argmax returns its choice (a multinomial draw over
            # [batch, vocab] rows cost ~5% of a decode step and returned the same token)
            max_new_tokens=limits.max_seq_len,
            eos_token_id=self.default_end_id if self.default_end_id is not None else -1,
            pad_token_id=self.default_end_id,
        )
        self._manager = model.init_continuous_batching(
            generation_config=generation_config, continuous_batching_config=cb_config
        )
        check_manager(self._manager)
        self.lora = LoraRuntime(model, self._manager, lora or LoraSettings())  # lora_apply.py: adapters per request
        self._manager.logit_processor.tensors_required = 1  # room for the sampler's slot column
        start_as_daemons(self._manager.start)  # transformers 5.24 starts a plain Thread (continuous_api.py:813-816)
        self._active: dict[str, _Active] = {}
        self._lock = threading.Lock()
        self._admission = Admission(total_blocks=self.kv_plan.blocks, max_active=limits.max_batch_size,
                                    policy=limits.scheduler_policy, batching=limits.batching)
        self._finished = 0
        self._ids = itertools.count()
        self._running = True
        self._perf0, self._wall0 = time.perf_counter(), time.time_ns()
        LOG.info("KV cache %d blocks x %d tokens = %d tokens (%.1f MiB), from %s; scheduler %s, "
                 "%s batching, up to %d requests at once%s", self.kv_plan.blocks, self.kv_plan.tokens_per_block,
                 self.kv_plan.tokens, self.kv_plan.bytes / 2**20, self.kv_plan.source, limits.scheduler_policy,
                 "static (V1)" if limits.batching == "static" else "in-flight", limits.max_batch_size,
                 f", at most {limits.max_queue_size} waiting" if limits.max_queue_size else "")
        self._dispatcher = threading.Thread(target=self._dispatch, name="reference-dispatch", daemon=True)
        self._dispatcher.start()

    @staticmethod
    def _plan_kv_cache(model, limits: EngineLimits) -> KvCachePlan:
        from pipeline.core.resources import free_ram_bytes

        dtype_bytes = model.dtype.itemsize if hasattr(model.dtype, "itemsize") else 4
        try:
            budget = KvCacheBudget(free_memory_bytes=free_ram_bytes(), free_fraction=limits.kv_cache_free_mem_fraction,
                                   max_tokens=limits.max_tokens_in_paged_kv_cache)
            return plan_kv_cache(budget, tokens_per_block=limits.tokens_per_block,
                                 bytes_per_token=kv_bytes_per_token(model.config, dtype_bytes),
                                 max_batch_size=limits.max_batch_size, max_seq_len=limits.max_seq_len)
        except KvCacheError as error:
            raise KvCacheError(f"{error} Raise max_tokens_in_paged_kv_cache or kv_cache_free_gpu_mem_fraction, "
                               "or free host memory.") from None

    # -- public ------------------------------------------------------------------------------------
    def validate(self, request: GenerationRequest) -> None:
        """Raise RequestError for a request this engine refuses (requests.check_request)."""
        check_request(request, self.limits, getattr(self, "kv_plan", None))

    def submit(
        self, request: GenerationRequest, callback: Callback, *, is_cancelled: Callable[[], bool] | None = None
    ) -> str:
        """Queue a request; callback gets GenerationEvents (the last has finished=True). Raises RequestError when
        the request is refused outright (invalid, queue full, shutting down); it starts once admitted."""
        self.validate(request)
        if not self._running:
            raise RequestError("The reference runtime is shutting down and accepts no new requests.")
        end_id = self.default_end_id if request.end_id is None else request.end_id
        end_ids = () if end_id is None or end_id < 0 else (int(end_id),)
        blocks = blocks_for(len(request.input_ids) + request.max_new_tokens, self.kv_plan.tokens_per_block)
        request_id = f"ref-{next(self._ids)}"
        with self._lock:
            if self.limits.max_queue_size and self._admission.waiting >= self.limits.max_queue_size:
                raise RequestError(
                    f"The reference runtime's queue is full: {self._admission.waiting} requests already wait for a "
                    f"batch slot or KV-cache blocks (max_queue_size {self.limits.max_queue_size}). Retry later.")
            adapter = self.lora.resolve(request.lora)  # RequestError: an unknown task id without weights, bad tensors
            options = SamplingOptions(**{**request.sampling.__dict__, "end_ids": end_ids})
            slot = self.sampler.register(options, request.input_ids)
            self.lora.bind(slot, adapter)
            self._active[request_id] = _Active(request_id, request, callback, slot, is_cancelled, time.time_ns(), blocks,
                                               end_ids)
            self._admission.queue(request_id, blocks)
        self._start_admitted()
        return request_id

    def cancel(self, request_id: str) -> bool:
        """End a request (its final event says "cancelled"); False when it is not running or waiting."""
        active = self._active.get(request_id)
        if active is None:
            return False
        self._finish(active, "cancelled", cancel_in_manager=True)
        return True

    def active_count(self) -> int:
        return len(self._active)

    def stats(self) -> RuntimeStats:
        with self._lock:
            active, waiting = self._admission.active, self._admission.waiting
            reserved, finished = self._admission.reserved_blocks, self._finished
        return RuntimeStats(active=active, waiting=waiting, max_active=self.limits.max_batch_size,
                            kv_blocks_max=self.kv_plan.blocks, kv_blocks_used=self._manager_blocks_used(),
                            kv_blocks_reserved=reserved, tokens_per_block=self.kv_plan.tokens_per_block,
                            finished=finished)

    def close(self) -> None:
        """Every request ends "cancelled", in the manager too (asked to stop, it first finishes what it holds:
        transformers 5.24 continuous_api.py:1099-1103); then the manager stops."""
        self._running = False
        for active in list(self._active.values()):
            self._finish(active, "cancelled", cancel_in_manager=True)
        try:
            self._manager.stop(block=True, timeout=10)
        except Exception:  # noqa: BLE001 - best effort at shutdown
            LOG.exception("stopping the continuous batching manager failed")

    # -- admission ---------------------------------------------------------------------------------
    def _start_admitted(self) -> None:
        """Hand every request the admission policy lets start to the batching manager (any thread)."""
        with self._lock:
            ready = [(rid, self._active[rid]) for rid in self._admission.ready() if rid in self._active]
            for _, active in ready:
                active.started = True
        for request_id, active in ready:
            with active.lock:  # a cancel either comes first (then it never starts) or reaches the manager after it
                if active.done:
                    continue
                try:
                    accepted = self._manager.add_request(
                        list(active.request.input_ids),
                        request_id=request_id,
                        max_new_tokens=active.request.max_new_tokens,
                        streaming=True,  # always: stop words and cancellation are checked per token
                        record_timestamps=False,
                        eos_token_id=list(active.end_ids) or [-1],
                        slot=active.slot,
                    )
                    error = None if accepted is not None else "the batching manager is not running"
                except Exception as failure:  # noqa: BLE001 - a stopped manager
                    error = str(failure) or type(failure).__name__
                if error is not None:
                    self._finish(active, "error", cancel_in_manager=False,
                                 error=f"The reference runtime could not start the request: {error}.")

    def _manager_blocks_used(self) -> int:
        """KV blocks the manager's cache has handed out (its free capacity, read without a lock: a gauge)."""
        processor = self._manager.batch_processor  # checked at start (internals.check_manager); None until it runs
        if processor is None:
            return 0
        free = processor.cache.compute_free_capacity(relative=True)
        return max(0, min(self.kv_plan.blocks, round(self.kv_plan.blocks * (1.0 - free))))

    # -- dispatcher --------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        period = max(0.001, self.limits.cancellation_check_period_ms / 1000.0)
        last_check = time.monotonic()
        while self._running:
            output = self._manager.get_result(timeout=min(0.05, period))
            if output is not None:
                try:
                    self._on_output(output)
                except Exception:  # noqa: BLE001 - one bad request must not stop the dispatcher
                    LOG.exception("handling output of %s failed", getattr(output, "request_id", "?"))
            if time.monotonic() - last_check > period:
                last_check = time.monotonic()
                self._check_cancellations()
            if output is None and not self._manager.is_running() and self._running:
                self._fail_all("The continuous batching manager stopped unexpectedly.")
                time.sleep(0.5)

    def _check_cancellations(self) -> None:
        for active in list(self._active.values()):
            probe = active.is_cancelled
            if probe is None:
                continue
            with active.lock:  # never probe a sender whose final response went out (see _Active.lock)
                if active.done:
                    continue
                try:
                    cancelled = probe()
                except Exception:  # noqa: BLE001
                    LOG.exception("cancellation probe failed")
                    continue
            if cancelled:  # the final response releases the cancelled request in Triton
                self._finish(active, "cancelled", cancel_in_manager=True)

    def _on_output(self, output) -> None:
        active = self._active.get(output.request_id)
        if active is None:
            return
        with active.lock:
            if not active.done:
                self._on_active_output(output, active)

    def _on_active_output(self, output, active: _Active) -> None:
        if output.error:
            self._finish(active, "error", error=str(output.error))
            return
        generated = list(output.generated_tokens)
        new = generated[active.seen:]
        active.seen = len(generated)
        reason = None
        added: list[int] = []
        for token in new:
            if token in active.end_ids:
                reason = "end_id"
                break
            active.tokens.append(token)
            added.append(token)
            if active.request.stop_words and ends_with_any(active.tokens, active.request.stop_words):
                reason = "stop_word"
                break
        if reason is None and output.is_finished():
            reason = "length"
        if added and not active.first_token_ns:
            active.first_token_ns = time.time_ns()
        if reason is not None:
            self._finish(active, reason, new_tokens=added, cancel_in_manager=not output.is_finished(),
                         scheduled=output.lifespan[0])
        elif added and active.request.streaming:
            active.callback(self._event(active, added, False, None, output.lifespan[0]))

    # -- helpers -----------------------------------------------------------------------------------
    def _event(self, active: _Active, new_tokens, finished, reason, scheduled_perf=-1.0, error=None) -> GenerationEvent:
        state = self.sampler.state(active.slot)
        logprobs = list(state.logprobs[: len(active.tokens)]) if state and active.request.return_log_probs else []
        now = time.time_ns()
        timings = {
            "arrival_time_ns": active.arrival_ns,
            "first_scheduled_time_ns": self._wall_ns(scheduled_perf) if scheduled_perf and scheduled_perf > 0 else 0,
            "first_token_time_ns": active.first_token_ns,
            "last_token_time_ns": now if active.tokens else 0,
        }
        return GenerationEvent(list(new_tokens), list(active.tokens), logprobs, finished, reason, error, timings)

    def _finish(self, active: _Active, reason, *, new_tokens=(), cancel_in_manager=False, error=None,
                scheduled=-1.0) -> None:
        request_id = active.request_id
        with active.lock:
            if active.done:
                return
            active.done = True
            if active.started and cancel_in_manager:
                self._manager.cancel_request(request_id)
                LOG.info("request %s ended (%s) after %d tokens; cancelled in the batching manager, its KV-cache "
                         "blocks are released", request_id, reason, len(active.tokens))
            elif not active.started and reason == "cancelled":
                LOG.info("request %s ended (cancelled) while waiting for a batch slot or KV-cache blocks", request_id)
            event = self._event(active, new_tokens, True, reason, scheduled, error)
            try:
                active.callback(event)
            except Exception:  # noqa: BLE001
                LOG.exception("final callback of %s failed", request_id)
        self._forget(request_id)

    def _forget(self, request_id: str) -> None:
        with self._lock:
            active = self._active.pop(request_id, None)
            if active is not None:
                self._finished += 1
                if active.started:
                    self._admission.release(request_id)
                else:
                    self._admission.drop(request_id)
        if active is not None:
            self.sampler.release(active.slot)
            self.lora.unbind(active.slot)
            if self._running:
                self._start_admitted()  # its slot (and blocks) may let a waiting request start

    def _fail_all(self, message: str) -> None:
        for active in list(self._active.values()):
            self._finish(active, "error", error=message)

    def _wall_ns(self, perf: float) -> int:
        return int(self._wall0 + (perf - self._perf0) * 1e9)


def intra_op_threads() -> int:
    """Torch threads for the model (pipeline.core.cpus.reference_threads: from the CPU affinity, the cgroup quota
    and $PIPELINE_CPU_LIMIT)."""
    from pipeline.core.cpus import reference_threads

    return reference_threads()


def _first(value):
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value

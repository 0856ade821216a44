"""tensorrt_llm, reference runtime: the TensorRT-LLM tensor contract served on the CPU.

Rendered only for `--runtime reference` (the `tensorrtllm` runtime uses the C++ backend and has no
model.py). The work is done by pipeline.reference_runtime (transformers' continuous batching with a
paged KV cache); this file maps Triton tensors to requests and events back to responses.

Parameters: read by pipeline.reference_runtime.settings (batching type, scheduler policy, KV-cache
budget, chunked context, KV reuse, check periods); what is honoured and what is ignored (and why) is
logged once at load into the server log. Both transaction policies answer through the response
sender, so `execute` returns at once: in-flight batching either way, and a `stop` reaches the
requests it targets while they run. The runtime's counters are Prometheus metrics under the C++
backend's names (nv_trt_llm_request_metrics, nv_trt_llm_kv_cache_block_metrics).

Supported inputs: input_ids, input_lengths, request_output_len, end_id, pad_id, stop_words_list,
bad_words_list, temperature, runtime_top_k, runtime_top_p, seed, min_tokens, streaming, draft_input_ids
(with draft_logits and draft_acceptance_threshold: verified against the target's own choice, as many as the
engine's max_draft_len; an engine built without speculation refuses them with TensorRT-LLM's error),
exclude_input_in_output, return_log_probs, return_perf_metrics, stop (with the request id of
running requests: cancels every one that carries it; an id with nothing running is answered with an
error saying so, where the C++ backend answers an empty success), return_num_input_tokens,
return_num_output_tokens, and beam_width / num_return_sequences equal to 1. len_penalty,
early_stopping and beam_search_diversity_rate only act on beam search and are accepted and ignored.
Every other input of the contract (LoRA, prompt tables, encoder-decoder,
multimodal, guided decoding, penalties, logits outputs, KV retention, lookahead, disaggregated
context phase) is declared but unsupported: a request that sets one gets an error naming it.
decoder_input_ids / decoder_input_lengths are ignored, as TensorRT-LLM ignores them for decoder-only
models (NVIDIA's preprocessing always sends [[pad_id]]); an empty tensor ([1, 0], [1, 2, 0]) counts as
unset, as it does for the C++ backend.
Output shapes are the C++ backend's (tensorrtllm_backend @c2e65b88, model_instance_state.cc
1079-1305): output_ids [1, beams, len], sequence_length and cum_log_probs [1, beams],
output_log_probs [1, beams, len], and with return_perf_metrics all ten perf tensors [1, 1]. The KV
block counts are derived from the request's tokens and tokens_per_block (this runtime does not share
blocks between requests, so kv_cache_reused_blocks is 0); the speculative-decoding figures count the
request's draft tokens (0 on an engine built without speculation).
An engine folder built with speculation (config.json build_config["speculative"]) is served by
pipeline.reference_runtime.speculation.SpeculativeEngine: draft-target or n-gram steps, greedy acceptance.
Outputs never produced here: context_logits, generation_logits (refused by name when requested),
context_phase_params (disaggregated serving).
"""

import json
import locale
import logging
import sys
import threading
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from pipeline_model_support import TritonLogHandler  # beside this file in the rendered repository

from pipeline.reference_runtime.engine import ReferenceEngine
from pipeline.reference_runtime.internals import TransformersInternalsError
from pipeline.reference_runtime.kv_cache import KvCacheError, blocks_for
from pipeline.reference_runtime.requests import EngineLimits, GenerationRequest, RequestError
from pipeline.reference_runtime.settings import SettingsError, check_rendered_by, read_settings
from pipeline.reference_runtime.sampling import SamplingOptions
from pipeline.reference_runtime.speculation import SpeculationError, SpeculativeConfig, SpeculativeEngine
from pipeline.reference_runtime.words import from_word_list

# name -> value that means "not used" (None: any value is refused once the tensor is present)
UNSUPPORTED = {
    "encoder_input_features": None, "encoder_output_lengths": None, "embedding_bias": None, "runtime_top_p_min": None,
    "runtime_top_p_decay": None, "runtime_top_p_reset_ids": None, "repetition_penalty": 1.0,
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "return_context_logits": False,
    "return_generation_logits": False, "prompt_embedding_table": None,
    "prompt_table_extra_ids": None, "prompt_vocab_size": None, "cross_attention_mask": None,
    "mrope_rotary_cos_sin": None, "mrope_position_deltas": None, "lora_task_id": None,
    "lora_weights": None, "lora_config": None, "context_phase_params": None,
    "skip_cross_attn_blocks": None, "retention_token_range_starts": None,
    "retention_token_range_ends": None, "retention_token_range_priorities": None,
    "retention_token_range_durations_ms": None, "retention_decode_priority": None,
    "retention_decode_duration_ms": None, "guided_decoding_guide_type": None,
    "guided_decoding_guide": None, "lookahead_window_size": None, "lookahead_ngram_size": None,
    "lookahead_verification_set_size": None, "beam_width": 1, "num_return_sequences": 1,
}


def _param(parameters, key, default=None):
    value = parameters.get(key, {}).get("string_value")
    return default if value in (None, "") else value


def _array(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _rows(request, name, row):
    array = _array(request, name)
    return None if array is None else (_row(array, row) if array.ndim == 3 else array)


def _row(array, row):
    """Batch entry `row` of a [B, ...] input; a one-row tensor applies to every entry."""
    return array[min(row, array.shape[0] - 1)] if array.ndim and array.shape[0] else array


def _scalar(request, name, cast, default=None, row=0):
    array = _array(request, name)
    if array is None or array.size == 0:
        return default
    return cast(np.asarray(_row(array, row)).reshape(-1)[0])


def _draft_tokens(request, row):
    """draft_input_ids (INT32 [-1] per entry; empty = unset), checked against draft_logits ([k, vocab] per entry)
    and draft_acceptance_threshold when those come too. Acceptance is by the target's own choice (speculation.py),
    so the logits and the threshold do not change the output."""
    ids = _array(request, "draft_input_ids")
    tokens = [] if ids is None or ids.size == 0 else [int(t) for t in np.asarray(_row(ids, row) if ids.ndim > 1 else ids).reshape(-1)]
    logits = _array(request, "draft_logits")
    if logits is not None and logits.size:
        rows = (_row(logits, row) if logits.ndim > 2 else logits).reshape(-1, logits.shape[-1]).shape[0]
        if rows != len(tokens):
            raise RequestError(f"draft_logits has {rows} rows for {len(tokens)} draft_input_ids: send one row of "
                               "logits per draft token, or no draft_logits")
    threshold = _scalar(request, "draft_acceptance_threshold", float, None, row)
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise RequestError(f"draft_acceptance_threshold must be between 0 and 1, got {threshold:g}")
    return tokens


class TritonPythonModel:
    def initialize(self, args):
        # The stub's embedded interpreter starts in the C locale (ASCII file reads); ModelOpt, used for
        # simulated precisions, imports torch inductor, which reads UTF-8 templates at import time.
        try:
            locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
        except locale.Error:
            pass
        logger = logging.getLogger("pipeline.reference_runtime")
        if not logger.handlers:  # into the server log, through Triton's own logger
            logger.addHandler(TritonLogHandler("reference_runtime: "))
            logger.setLevel(logging.INFO)
        import transformers  # which Python this stub embeds: the CPU runtime's needs the pipeline's packages

        pb_utils.Logger.log_info(f"reference tensorrt_llm: python prefix {sys.prefix}, transformers "
                                 f"{transformers.__version__}, executable {sys.executable}")
        self.model_config = json.loads(args["model_config"])
        try:  # the pipeline imported here must be the one that rendered this repository
            check_rendered_by(args["model_repository"])
        except SettingsError as error:
            raise pb_utils.TritonModelException(f"tensorrt_llm (reference runtime): {error}") from None
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self.model_config)
        parameters = self.model_config.get("parameters", {})
        engine_dir = Path(_param(parameters, "gpt_model_path"))
        engine_config = json.loads((engine_dir / "config.json").read_text(encoding="utf-8"))
        if engine_config.get("runtime") != "reference":
            raise pb_utils.TritonModelException(
                f"{engine_dir} is not a reference-runtime engine folder; render with --runtime tensorrtllm for TensorRT engines"
            )
        try:
            settings = read_settings(parameters)
        except SettingsError as error:
            raise pb_utils.TritonModelException(f"tensorrt_llm (reference runtime): {error}") from None
        queue = self.model_config.get("dynamic_batching", {}).get("default_queue_policy", {})
        limits = EngineLimits.from_build_config(
            engine_config["build_config"],
            max_tokens_in_paged_kv_cache=settings.max_tokens_in_paged_kv_cache,
            kv_cache_free_mem_fraction=settings.kv_cache_free_mem_fraction,
            enable_kv_cache_reuse=settings.enable_kv_cache_reuse,
            max_queue_size=int(queue.get("max_queue_size", 0) or 0),
            scheduler_policy=settings.scheduler_policy,
            batching=settings.batching,
            cancellation_check_period_ms=settings.cancellation_check_period_ms,
        )
        self.tokens_per_block = limits.tokens_per_block
        self.exclude_input_default = settings.exclude_input_in_output
        for line in settings.honoured:
            logger.info("honours %s", line)
        for line in settings.ignored:
            logger.warning("ignores %s", line)
        simulated = engine_config.get("pretrained_config", {}).get("quantization", {}).get("simulated") or {}
        quant = (simulated.get("quant", "fp16"), simulated.get("kv_cache", "auto"))
        try:
            speculative = SpeculativeConfig.from_engine_config(engine_config, engine_dir)
            if speculative is not None:  # built with speculation: draft-target or n-gram steps (speculation.py)
                self.engine = SpeculativeEngine(engine_dir / "model", limits, speculative, simulated_quant=quant)
            else:
                self.engine = ReferenceEngine(engine_dir / "model", limits, simulated_quant=quant)
        except (KvCacheError, TransformersInternalsError, SpeculationError) as error:
            raise pb_utils.TritonModelException(f"tensorrt_llm (reference runtime): {error}") from None
        # client request id -> {engine request ids still running}, for `stop` requests. Clients may reuse an id:
        # every request is served, and a stop cancels every running request that carries the id.
        self.running = {}
        self.running_lock = threading.Lock()
        self.metrics = _RuntimeMetrics(self.engine, args.get("model_name", "tensorrt_llm"),
                                       args.get("model_version", "1"), settings.stats_check_period_ms / 1000.0)

    def execute(self, requests):
        # Both transaction policies answer through each request's response sender (the Python backend allows it
        # in the default mode since 24.06, exactly one final response per request), so execute returns at once:
        # requests join the running batch, and a `stop` is handled while the requests it targets still run.
        for request in requests:
            self._start(request, request.get_response_sender())
        return None

    def _start(self, request, sender):
        triton_id = request.request_id()
        if _scalar(request, "stop", bool, False):
            self._stop(triton_id, sender)
            return
        try:
            input_ids = _array(request, "input_ids")
            batch = 1 if input_ids is None or input_ids.ndim < 2 else input_ids.shape[0]
            if batch > 1 and not self.decoupled:  # TensorRT-LLM's backend refuses it too (utils.cc:900-902)
                raise RequestError("Batch size > 1 requires the tensorrt_llm model to use the decoupled transaction "
                                   "policy; render with --decoupled or send one prompt per request")
            rows = [self._parse(request, row) for row in range(batch)]
            if rows[0][1] and not self.decoupled:
                raise RequestError("streaming needs the decoupled transaction policy; render with --decoupled")
        except (RequestError, ValueError, TypeError) as error:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        if triton_id:
            with self.running_lock:
                already = len(self.running.get(triton_id, ()))
            if already:
                logging.getLogger("pipeline.reference_runtime").warning(
                    "request id %r is already in use by %d running request(s): each is served on its own, and a "
                    "stop with this id cancels all of them", triton_id, already)
        shared = _BatchSender(sender, batch)
        for row, parsed in enumerate(rows):
            self._submit(request, triton_id, row if batch > 1 else None, parsed, shared)

    def _stop(self, triton_id, sender):
        """A `stop` request: cancel every running request with this client request id. As the C++ backend
        (model_instance_state.cc handleStopRequest) a stop without an id is an error; unlike it, a stop that
        finds nothing to cancel says so (an error naming the id) instead of an empty success."""
        log = logging.getLogger("pipeline.reference_runtime")
        if not triton_id:
            error = "Trying to stop a request but request ID is not provided: send the id of the request to stop."
        else:
            with self.running_lock:
                targets = list(self.running.get(triton_id, ()))
            stopped = sum(1 for engine_id in targets if self.engine.cancel(engine_id))
            if stopped:
                log.info("stop %r: cancelled %d running request(s)", triton_id, stopped)
                error = None
            else:
                log.info("stop %r: no running request has this id; nothing cancelled", triton_id)
                error = (f"stop: no running request has id {triton_id!r} (it finished, was stopped already, or was "
                         "never sent); nothing was cancelled.")
        if error is not None:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        elif self.decoupled:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:  # the default mode needs one response: an empty one, as the C++ backend sends
            sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _submit(self, request, triton_id, batch_index, parsed, sender):
        job, streaming, exclude_input, flags = parsed
        prompt = list(job.input_ids)
        cum = {"logprob": 0.0}
        state = {"engine_id": None, "finished": False}

        def forget():
            with self.running_lock:
                state["finished"] = True
                ids = self.running.get(triton_id)
                if ids is not None and state["engine_id"] is not None:
                    ids.discard(state["engine_id"])
                    if not ids:
                        del self.running[triton_id]

        def on_event(event):
            if event.finished:
                forget()
            if event.error:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(event.error)),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if streaming:
                if event.new_tokens or event.finished:
                    final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if event.finished else 0
                    if event.new_tokens:
                        sender.send(self._response(event, event.new_tokens, prompt, flags, cum, True, batch_index),
                                    flags=final)
                    elif final:
                        sender.send(flags=final)
                return
            if event.finished:
                ids = event.tokens if exclude_input else prompt + event.tokens
                sender.send(self._response(event, ids, prompt, flags, cum, False, batch_index),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        probe = getattr(sender, "is_cancelled", None)
        try:
            engine_id = self.engine.submit(job, on_event, is_cancelled=probe)
        except RequestError as error:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        if triton_id:
            with self.running_lock:
                state["engine_id"] = engine_id
                if not state["finished"]:
                    self.running.setdefault(triton_id, set()).add(engine_id)

    def _parse(self, request, row=0):
        for name, neutral in UNSUPPORTED.items():
            array = _array(request, name)
            if array is None or array.size == 0:
                continue
            if neutral is not None and array.size and all(v == neutral for v in array.reshape(-1).tolist()):
                continue
            raise RequestError(f"Input '{name}' is not supported by the reference runtime (CPU); leave it unset.")
        input_ids = _array(request, "input_ids")
        if input_ids is None:
            raise RequestError("input_ids is required")
        ids = np.asarray(_row(input_ids, row) if input_ids.ndim > 1 else input_ids).reshape(-1).tolist()
        length = _scalar(request, "input_lengths", int, len(ids), row)
        ids = [int(t) for t in ids[:length]]
        max_new = _scalar(request, "request_output_len", int, None, row)
        if max_new is None:
            raise RequestError("request_output_len is required")
        top_k = _scalar(request, "runtime_top_k", int, 0, row)
        top_p = _scalar(request, "runtime_top_p", float, 0.0, row)
        sampling = SamplingOptions(
            temperature=_scalar(request, "temperature", float, 1.0, row),
            top_k=top_k,
            top_p=top_p,
            seed=_scalar(request, "seed", int, None, row),
            min_tokens=_scalar(request, "min_tokens", int, 0, row),
            bad_words=tuple(tuple(w) for w in from_word_list(_rows(request, "bad_words_list", row))),
        )
        job = GenerationRequest(
            input_ids=ids,
            max_new_tokens=max_new,
            end_id=_scalar(request, "end_id", int, None, row),
            stop_words=from_word_list(_rows(request, "stop_words_list", row)),
            sampling=sampling,
            streaming=_scalar(request, "streaming", bool, False, row),
            return_log_probs=_scalar(request, "return_log_probs", bool, False, row),
            draft_tokens=_draft_tokens(request, row),
        )
        self.engine.validate(job)
        exclude = _scalar(request, "exclude_input_in_output", bool, self.exclude_input_default, row)
        flags = {
            "return_log_probs": job.return_log_probs,
            "return_perf_metrics": _scalar(request, "return_perf_metrics", bool, False, row),
            "return_num_input_tokens": _scalar(request, "return_num_input_tokens", bool, False, row),
            "return_num_output_tokens": _scalar(request, "return_num_output_tokens", bool, False, row),
        }
        return job, job.streaming, exclude, flags

    def _response(self, event, ids, prompt, flags, cum, streaming, batch_index=None):
        tensors = [
            pb_utils.Tensor("output_ids", np.array([[ids]], dtype=np.int32).reshape(1, 1, len(ids))),
            pb_utils.Tensor("sequence_length", np.array([[len(ids)]], dtype=np.int32)),
        ]
        if flags["return_log_probs"]:
            if streaming:
                chunk = event.logprobs[len(event.tokens) - len(event.new_tokens):]
            else:
                chunk = event.logprobs
            cum["logprob"] = float(sum(event.logprobs))
            tensors.append(pb_utils.Tensor("cum_log_probs", np.array([[cum["logprob"]]], dtype=np.float32)))
            tensors.append(pb_utils.Tensor("output_log_probs", np.array(chunk, dtype=np.float32).reshape(1, 1, -1)))
        if flags["return_perf_metrics"]:
            for name, value in event.timings_ns.items():
                tensors.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int64)))
            blocks = blocks_for(len(prompt) + len(event.tokens), self.tokens_per_block)
            for name, value in (("kv_cache_alloc_new_blocks", blocks), ("kv_cache_reused_blocks", 0),
                                ("kv_cache_alloc_total_blocks", blocks),
                                ("total_accepted_draft_tokens", event.total_accepted_draft_tokens),
                                ("total_draft_tokens", event.total_draft_tokens)):
                tensors.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int32)))
            tensors.append(pb_utils.Tensor("acceptance_rate", np.array([[event.acceptance_rate]], dtype=np.float32)))
        if batch_index is not None:  # only for a request batch > 1, as the C++ backend does
            tensors.append(pb_utils.Tensor("batch_index", np.array([[batch_index]], dtype=np.int32)))
        if flags["return_num_input_tokens"]:
            tensors.append(pb_utils.Tensor("num_input_tokens", np.array([[len(prompt)]], dtype=np.int32)))
        if flags["return_num_output_tokens"]:
            tensors.append(pb_utils.Tensor("num_output_tokens", np.array([[len(event.tokens)]], dtype=np.int32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def finalize(self):
        self.metrics.close()
        self.engine.close()


class _BatchSender:
    """One response sender shared by the batch entries of a request: each entry's final response goes
    out as an ordinary one, and the last entry to finish closes the request."""

    def __init__(self, sender, entries):
        self.sender, self.open = sender, entries
        self.lock = threading.Lock()
        self.is_cancelled = getattr(sender, "is_cancelled", None)

    def send(self, response=None, flags=0):
        with self.lock:
            if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self.open -= 1
                if self.open > 0:
                    flags = 0
                    if response is None:
                        return
            if response is None:
                self.sender.send(flags=flags)
            else:
                self.sender.send(response, flags=flags)


class _RuntimeMetrics:
    """The runtime's own counters (ReferenceEngine.stats) as the C++ backend's Prometheus families
    (custom_metrics_reporter.cc; ../shared/reference/triton_trtllm_metrics.tsv), refreshed every
    stats_check_period_ms: nv_trt_llm_request_metrics {active, max, waiting} and
    nv_trt_llm_kv_cache_block_metrics {max, free, used, tokens_per, fraction}; and ours,
    pipeline_requests_in_flight: requests admitted or waiting for admission, the count the autoscaler reads
    (pipeline/data/k8s/scaling_rules.yaml)."""

    def __init__(self, engine, model, version, period_s):
        self.engine, self.period_s = engine, max(0.01, period_s)
        labels = {"model": model, "version": str(version)}
        requests = pb_utils.MetricFamily(name="nv_trt_llm_request_metrics", description="TRT LLM request metrics",
                                         kind=pb_utils.MetricFamily.GAUGE)
        blocks = pb_utils.MetricFamily(name="nv_trt_llm_kv_cache_block_metrics",
                                       description="TRT LLM KV cache block metrics", kind=pb_utils.MetricFamily.GAUGE)
        in_flight = pb_utils.MetricFamily(name="pipeline_requests_in_flight", kind=pb_utils.MetricFamily.GAUGE,
                                          description="Requests accepted and not yet finished (queued or running)")
        self.families = (requests, blocks, in_flight)
        self.gauges = {
            "in_flight": in_flight.Metric(labels=labels),
            **{f"request_{kind}": requests.Metric(labels={**labels, "request_type": kind})
               for kind in ("active", "max", "waiting")},
            **{f"kv_{kind}": blocks.Metric(labels={**labels, "kv_cache_block_type": kind})
               for kind in ("max", "free", "used", "tokens_per", "fraction")},
        }
        self.last = {}
        self.stopped = threading.Event()
        self.refresh()
        self.thread = threading.Thread(target=self._loop, name="reference-metrics", daemon=True)
        self.thread.start()

    def refresh(self):
        stats = self.engine.stats()
        values = {"in_flight": stats.active + stats.waiting,
                  "request_active": stats.active, "request_max": stats.max_active, "request_waiting": stats.waiting,
                  "kv_max": stats.kv_blocks_max, "kv_free": stats.kv_blocks_free, "kv_used": stats.kv_blocks_used,
                  "kv_tokens_per": stats.tokens_per_block,
                  "kv_fraction": stats.kv_blocks_used / stats.kv_blocks_max if stats.kv_blocks_max else 0.0}
        for key, value in values.items():
            if self.last.get(key) != value:
                self.gauges[key].set(value)
                self.last[key] = value

    def _loop(self):
        while not self.stopped.wait(self.period_s):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - metrics must never stop serving
                logging.getLogger("pipeline.reference_runtime").exception("updating the runtime metrics failed")

    def close(self):
        self.stopped.set()
        self.thread.join(timeout=2)

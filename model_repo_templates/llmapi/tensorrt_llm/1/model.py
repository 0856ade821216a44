"""tensorrt_llm (LLM API): TensorRT-LLM's Triton LLM-API tensor contract, served by `tensorrt_llm.LLM` in the
image or by pipeline's reference runtime on the CPU. Ours: written for this project, not copied.

The contract is NVIDIA's `triton_backend/all_models/llmapi/tensorrt_llm` (pipeline/data/llmapi/contract.json
names the upstream commits): one prompt per request in `text_input` ([1] strings; the model does not batch
Triton requests, max_batch_size 0), `streaming`, the `sampling_param_*` inputs, `return_finish_reason`,
`return_stop_reason`, `return_cumulative_logprob`, `stop`, and (ours, named after NVIDIA's later version of this
model, whose helpers.py get_lora_request_from_request reads them: 1.1's has no per-request LoRA) `lora_name`,
`lora_path`, `lora_id` and `lora_ckpt_source`; outputs `text_output` and, when asked for,
`finish_reason`, `stop_reason`, `cumulative_logprob` and the perf tensors. As upstream's model.py:
  - `text_output` is CompletionOutput.text, as TensorRT-LLM 1.1 makes it: when streaming, the text generated so far
    (cumulative, not a delta), never the prompt; without streaming, the prompt and the generated text unless
    `sampling_param_exclude_input_from_output` is true (upstream's default is false), and then a stop string
    is looked for in the prompt too (pipeline/reference_runtime/completion.py has the rules and their sources);
  - finish_reason is 'stop', 'length' or 'cancelled' on the last response and 'None' before it;
  - `stop` with the request id of running requests aborts them;
  - max_batch_size and the transaction policy come from model.yaml `triton_config` (auto_complete_config);
  - responses go out from one thread of their own (ResponseSender.send waits for the Triton process:
    python_backend r25.12 src/response_sender.cc:180-183), so the engine never waits on a client; the same
    thread asks every running request, every `cancellation_check_period_ms` (100), whether its client
    cancelled it, and aborts the generation of one that was, streamed or not (upstream's _response_loop and
    cancellation_loop, model.py @b35ac1b6).
LoRA per request: lora_name, lora_path (a PEFT adapter folder on the server) and lora_id come together or not at
all, as NVIDIA's later helpers.py requires (its messages); the LLM API gets LoRARequest(lora_name, lora_int_id,
lora_path, lora_ckpt_source) in generate_async (1.1's executor/request.py LoRARequest), and the reference runtime
converts the folder to TensorRT-LLM's tensors once per lora_id (pipeline.convert.lora) and serves it from its
LoRA cache (pipeline/reference_runtime/lora.py), an HF adapter only.
Where we differ from upstream's model.py: cumulative_logprob and the perf tensors are sent with the data types
config.pbtxt declares (upstream sends strings for them), return_cumulative_logprob asks the LLM API for
log-probs (SamplingParams.logprobs=1; upstream never sets it, and 1.1 fills cumulative_logprob only then), a
`text_input` with more than one prompt is refused (upstream reads the first and drops the rest), and a request error carries no `text_output`.

model.yaml: every key but `triton_config` goes to `tensorrt_llm.LLM(**keys)` (as upstream, through
update_llm_args_with_extra_dict). `triton_config.runtime` (ours) picks the engine: `llmapi` (the default,
TensorRT-LLM's PyTorch backend on the GPUs) or `reference` (a deployable built with `--gpu cpu`: the HF
checkpoint at `model` run by pipeline.reference_runtime). The reference runtime honours max_tokens,
temperature, top_k, top_p, seed, stop, exclude_input_from_output, return_perf_metrics and the return_* flags;
best_of, frequency_penalty and presence_penalty are accepted and ignored, and the server log says so (once per
input, at its first non-default value). The LLM options it maps (max_batch_size, max_num_tokens,
max_seq_len, max_input_len, kv_cache_config, scheduler_config) and those it ignores are logged at load.
"""

import asyncio
import json
import logging
import os
import queue
import sys
import threading
import time
from functools import partial

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml
from pipeline_model_support import IncrementalText, TritonLogHandler  # beside this file, rendered with it

MODEL_YAML = "model.yaml"
LOG = logging.getLogger("pipeline.llmapi_model")
# LLM-API SamplingParams defaults the contract relies on (upstream helpers.py default_values; max_tokens: SamplingParams).
DEFAULT_MAX_TOKENS = 32
# upstream model.py @b35ac1b6: cancellation_check_period_ms defaults to 100
DEFAULT_CANCEL_PERIOD_MS = 100
# Inputs the reference runtime cannot act on, with the value that changes nothing.
IGNORED_ON_CPU = {"sampling_param_best_of": 1, "sampling_param_frequency_penalty": 0.0,
                  "sampling_param_presence_penalty": 0.0}
FINISH_REASONS = {"end_id": "stop", "stop_word": "stop", "length": "length", "cancelled": "cancelled"}
PERF_INT32 = ("kv_cache_reused_block", "kv_cache_missed_block", "kv_cache_alloc_new_blocks",
              "kv_cache_alloc_total_blocks", "total_accepted_draft_tokens", "total_draft_tokens")
PERF_INT64 = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
PERF_FP32 = ("kv_cache_hit_rate", "acceptance_rate")


def read_model_yaml():
    """model.yaml beside this file ($LLM_CONFIG_PATH names another file in the same folder, as upstream)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.environ.get("LLM_CONFIG_PATH", MODEL_YAML))
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        raise pb_utils.TritonModelException(f"tensorrt_llm: cannot read {path}: {error}") from None
    if not isinstance(config, dict) or not isinstance(config.get("triton_config"), dict) or not config.get("model"):
        raise pb_utils.TritonModelException(f"tensorrt_llm: {path} needs `model` and a `triton_config` mapping")
    return config


def _tensor(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class Job:
    """One request of the contract, parsed. `read(name)` gives an input as a numpy array (None when absent)."""

    def __init__(self, read):
        def scalar(name, cast, default=None):
            array = read(name)
            if array is None or array.size == 0:
                return default
            if array.size != 1:
                raise ValueError(f"{name} must hold one value, got {array.size}")
            return cast(array.reshape(-1)[0])

        prompts = read("text_input")
        if prompts is None or prompts.size == 0:
            raise ValueError("text_input is missing from the request")
        if prompts.size != 1:
            raise ValueError(f"text_input holds {prompts.size} prompts; this model takes one prompt per request "
                             "(send several requests)")
        self.prompt = _text(prompts.reshape(-1)[0])
        self.streaming = scalar("streaming", bool, False)
        self.max_tokens = scalar("sampling_param_max_tokens", int, DEFAULT_MAX_TOKENS)
        self.temperature = scalar("sampling_param_temperature", float)
        self.top_k = scalar("sampling_param_top_k", int)
        self.top_p = scalar("sampling_param_top_p", float)
        self.seed = scalar("sampling_param_seed", int)
        self.best_of = scalar("sampling_param_best_of", int, 1)
        self.frequency_penalty = scalar("sampling_param_frequency_penalty", float)
        self.presence_penalty = scalar("sampling_param_presence_penalty", float)
        stop = read("sampling_param_stop")
        self.stop = [_text(v) for v in stop.reshape(-1)] if stop is not None else []
        if any(s == "" for s in self.stop):
            raise ValueError("sampling_param_stop holds an empty string")
        self.exclude_input = scalar("sampling_param_exclude_input_from_output", bool, False)
        self.perf = scalar("sampling_param_return_perf_metrics", bool, False)
        self.want = {name: scalar(name, bool, False)
                     for name in ("return_finish_reason", "return_stop_reason", "return_cumulative_logprob")}
        if self.max_tokens < 1:
            raise ValueError(f"sampling_param_max_tokens must be at least 1, got {self.max_tokens}")
        self.lora = _lora_fields(scalar)


    def sampling_kwargs(self):
        """The tensorrt_llm.SamplingParams keyword arguments the request sets (upstream helpers.py's mapping), and
        logprobs=1 when it asks for cumulative_logprob: TensorRT-LLM 1.1 returns cum_log_probs only for a request
        with log-probs (sampling_params.py _get_output_config: return_log_probs=bool(self.logprobs) on the PyTorch
        backend; llmRequest.cpp @119c6e60 createResult: cumLogProbs only when returnLogProbs())."""
        values = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_k": self.top_k,
                  "top_p": self.top_p, "seed": self.seed, "best_of": self.best_of,
                  "frequency_penalty": self.frequency_penalty, "presence_penalty": self.presence_penalty,
                  "exclude_input_from_output": self.exclude_input, "return_perf_metrics": self.perf,
                  "stop": self.stop or None, "logprobs": 1 if self.want["return_cumulative_logprob"] else None}
        return {key: value for key, value in values.items() if value is not None}


LORA_CKPT_SOURCES = ("hf", "nemo")


def _lora_fields(scalar):
    """(lora_name, lora_id, lora_path, lora_ckpt_source) of a request, None without them (NVIDIA's later helpers.py
    get_lora_request_from_request: all three or none, the source hf or nemo, the path checked on the server)."""
    lora_id, name, path = scalar("lora_id", int), scalar("lora_name", _text), scalar("lora_path", _text)
    if lora_id is None and name is None and path is None:
        return None
    if lora_id is None or name is None or path is None:
        raise ValueError("lora_id, lora_name, and lora_path must all be provided together")
    source = scalar("lora_ckpt_source", _text, "hf")
    if source not in LORA_CKPT_SOURCES:
        raise ValueError(f"lora_ckpt_source must be one of {LORA_CKPT_SOURCES}, got {source!r}")
    if not os.path.exists(path):
        raise ValueError(f"lora_path does not exist on the Triton server's filesystem: {path}")
    return name, lora_id, path, source


class Update:
    """What one response carries: the text so far and, on the last one, why it ended."""

    def __init__(self, text, finished, finish_reason=None, stop_reason=None, cumulative_logprob=None, perf=None):
        self.text, self.finished = text, finished
        self.finish_reason, self.stop_reason = finish_reason, stop_reason
        self.cumulative_logprob, self.perf = cumulative_logprob, perf or {}


def make_response(job, update):
    tensors = [pb_utils.Tensor("text_output", np.array([update.text.encode("utf-8")], dtype=np.object_))]
    if job.want["return_finish_reason"]:
        tensors.append(pb_utils.Tensor("finish_reason", np.array([str(update.finish_reason).encode()], dtype=np.object_)))
    if job.want["return_stop_reason"]:
        tensors.append(pb_utils.Tensor("stop_reason", np.array([str(update.stop_reason).encode()], dtype=np.object_)))
    if job.want["return_cumulative_logprob"] and update.cumulative_logprob is not None:
        tensors.append(pb_utils.Tensor("cumulative_logprob", np.array([update.cumulative_logprob], dtype=np.float32)))
    if job.perf:
        for names, dtype in ((PERF_INT32, np.int32), (PERF_INT64, np.int64), (PERF_FP32, np.float32)):
            for name in names:
                if name in update.perf:
                    tensors.append(pb_utils.Tensor(name, np.array([update.perf[name]], dtype=dtype)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def error_response(message, code=None):
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    return pb_utils.InferenceResponse(error=error)


class _Call:
    """One request and its response sender. `closed` once its final response is sent (or dropped): after that
    nothing may touch the sender (Triton frees the response factory with the final response, and
    is_cancelled() on a freed factory crashes tritonserver in TRITONBACKEND_ResponseFactoryIsCancelled)."""

    def __init__(self, request, sender, job=None):
        self.request, self.sender, self.job = request, sender, job
        self.user_id = request.request_id() if request is not None else ""
        self.handle = None
        self.closed = False

    def is_cancelled(self):
        probe = getattr(self.sender, "is_cancelled", None) or getattr(self.request, "is_cancelled", None)
        return bool(probe()) if probe is not None else False


class _Responder:
    """The one thread that talks to the response senders: it sends what the engines put in its queue, in order,
    and every `period_s` asks each running request whether its client cancelled it (then the generation is
    aborted and the request answered with a CANCELLED error, as upstream's cancellation_loop does). Only this
    thread sends or asks, so "the final response went out" and "ask is_cancelled" never overlap."""

    def __init__(self, abort, period_s):
        self.abort, self.period_s = abort, period_s
        self.queue = queue.Queue()
        self.lock = threading.Lock()
        self.running = {}  # id(call) -> call: requests whose final response has not gone out
        self.thread = threading.Thread(target=self._loop, name="llmapi-responder", daemon=True)
        self.thread.start()

    def track(self, call):
        """Poll `call` for cancellation from now on (unless its final response already went out)."""
        with self.lock:
            if not call.closed:
                self.running[id(call)] = call

    def put(self, call, response, final):
        self.queue.put((call, response, final))

    def calls_of(self, user_id):
        with self.lock:
            return [call for call in self.running.values() if call.user_id == user_id]

    def close(self):
        self.queue.put(None)
        self.thread.join(timeout=10)

    def _close(self, call):
        with self.lock:
            call.closed = True
            self.running.pop(id(call), None)

    def _loop(self):
        next_poll = time.monotonic() + self.period_s
        while True:
            try:
                item = self.queue.get(timeout=max(0.0, next_poll - time.monotonic()))
            except queue.Empty:
                item = ()
            if item is None:
                return
            if item:
                self._send(*item)
            if time.monotonic() >= next_poll:
                self._poll()
                next_poll = time.monotonic() + self.period_s

    def _send(self, call, response, final):
        if call.closed:
            return
        if final:
            self._close(call)
        try:
            call.sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)
        except Exception as error:  # noqa: BLE001 - one client's failure must not stop the others
            LOG.error("tensorrt_llm: sending a response failed: %s", error)

    def _poll(self):
        with self.lock:
            calls = list(self.running.values())
        for call in calls:
            try:
                cancelled = call.is_cancelled()
            except Exception as error:  # noqa: BLE001
                LOG.error("tensorrt_llm: asking whether a request was cancelled failed: %s", error)
                continue
            if cancelled:
                self._close(call)
                if call.handle is not None:
                    self.abort(call.handle)
                try:
                    call.sender.send(error_response("Request cancelled by client", pb_utils.TritonError.CANCELLED),
                                     flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except Exception as error:  # noqa: BLE001
                    LOG.error("tensorrt_llm: answering a cancelled request failed: %s", error)


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        """max_batch_size and the transaction policy from model.yaml triton_config, as upstream."""
        triton_config = read_model_yaml()["triton_config"]
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=bool(triton_config["decoupled"])))
        auto_complete_model_config.set_max_batch_size(int(triton_config["max_batch_size"]))
        return auto_complete_model_config

    def initialize(self, args):
        logger = logging.getLogger("pipeline")
        if not any(isinstance(h, TritonLogHandler) for h in logger.handlers):  # into the server log
            logger.addHandler(TritonLogHandler())
            logger.setLevel(logging.INFO)
        try:  # which Python this stub embeds (the image's, never the pipeline's venv, on a GPU)
            from transformers import __version__ as transformers_version
        except ImportError:
            transformers_version = "none"
        pb_utils.Logger.log_info(f"llmapi tensorrt_llm: python prefix {sys.prefix}, transformers {transformers_version}"
                                 f", executable {sys.executable}")
        config = read_model_yaml()
        model_config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(model_config)
        triton_config = config.pop("triton_config")
        runtime = str(triton_config.get("runtime", "llmapi"))
        if runtime == "reference":
            self.engine = _ReferenceEngine(config, triton_config)
        elif runtime == "llmapi":
            self.engine = _LlmApiEngine(config)
        else:
            raise pb_utils.TritonModelException(
                f"tensorrt_llm: model.yaml triton_config.runtime is {runtime!r}; use llmapi (TensorRT-LLM) or reference (CPU)")
        period_ms = int(triton_config.get("cancellation_check_period_ms") or DEFAULT_CANCEL_PERIOD_MS)
        self.responder = _Responder(self.engine.abort, max(1, period_ms) / 1000.0)
        self.in_flight = _InFlight(args.get("model_name", "tensorrt_llm"), args.get("model_version", "1"))

    def execute(self, requests):
        # Every request answers through its response sender, so execute returns at once: requests join the
        # running batch in either transaction policy, and a `stop` reaches the requests it names while they run.
        for request in requests:
            self._start(request)
        return None

    def _start(self, request):
        call = _Call(request, self.in_flight.track(request.get_response_sender()))
        try:
            if _stop_flag(request):
                self._stop(call)
                return
            call.job = Job(partial(_tensor, request))
            if call.job.streaming and not self.decoupled:
                raise ValueError("streaming needs the decoupled transaction policy (render with --decoupled)")
        except (ValueError, TypeError) as error:
            self.responder.put(call, error_response(f"Error generating request: {error}"), True)
            return
        job, responder = call.job, self.responder

        def emit(update):
            if job.streaming or update.finished:
                responder.put(call, make_response(job, update), update.finished)

        def fail(message):
            responder.put(call, error_response(f"Error generating request: {message}"), True)

        try:
            call.handle = self.engine.submit(job, emit, fail)
        except (ValueError, RuntimeError) as error:
            fail(str(error))
            return
        responder.track(call)

    def _stop(self, call):
        if not call.user_id:
            self.responder.put(call, error_response("A request id must be provided for request cancellation"), True)
            return
        for running in self.responder.calls_of(call.user_id):
            if running.handle is not None:
                self.engine.abort(running.handle)
        # as upstream: the stop request itself is answered with a CANCELLED error
        self.responder.put(call, error_response("Request cancelled by client", pb_utils.TritonError.CANCELLED), True)

    def finalize(self):
        self.engine.close()
        self.responder.close()


def _stop_flag(request):
    """The `stop` input: true asks to abort the running requests with this request's id."""
    array = _tensor(request, "stop")
    if array is None or array.size == 0:
        return False
    if array.size != 1:
        raise ValueError(f"stop must hold one value, got {array.size}")
    return bool(array.reshape(-1)[0])


class _ReferenceEngine:
    """pipeline.reference_runtime behind the contract: the HF checkpoint at `model` on the CPU."""

    def __init__(self, config, triton_config):
        import locale

        try:  # the stub's interpreter starts in the C locale; ModelOpt/torch read UTF-8 files at import
            locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
        except locale.Error:
            pass
        from transformers import AutoTokenizer

        from pipeline.reference_runtime.engine import ReferenceEngine
        from pipeline.reference_runtime.internals import TransformersInternalsError
        from pipeline.reference_runtime.kv_cache import KvCacheError
        from pipeline.reference_runtime.settings import limits_from_llm_options

        model_dir = config.get("model")
        self.limits, honoured, ignored = limits_from_llm_options(config, triton_config)
        for line in honoured:
            LOG.info("reference runtime honours %s", line)
        for line in ignored:
            LOG.warning("reference runtime ignores %s", line)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
        simulated = triton_config.get("simulated") or {}
        if simulated:
            LOG.info("reference runtime simulates %s (KV %s) with ModelOpt fake quantization over %s",
                     simulated.get("quant"), simulated.get("kv_cache"), model_dir)
        try:
            self.engine = ReferenceEngine(model_dir, self.limits, simulated_quant=(
                simulated.get("quant", "fp16"), simulated.get("kv_cache", "auto")))
        except (KvCacheError, TransformersInternalsError) as error:
            raise pb_utils.TritonModelException(f"tensorrt_llm (reference runtime): {error}") from None
        self.warned = set()
        self.warned_lock = threading.Lock()
        self.lora_tasks = {}  # lora_id -> the engine's task id (from 1: the engine refuses 0, the LLM API takes it)
        self.lora_lock = threading.Lock()

    def _lora(self, lora):
        """The engine's LoraRequest for a request's (name, id, path, source): the converted weights the first time,
        the task id alone while the engine's cache holds it."""
        from pipeline.core.errors import PipelineError
        from pipeline.reference_runtime.lora import LoraRequest

        if lora is None:
            return None
        _name, lora_id, path, source = lora
        if source != "hf":
            raise ValueError(f"lora_ckpt_source {source}: the reference runtime reads Hugging Face PEFT folders only")
        with self.lora_lock:
            task = self.lora_tasks.setdefault(lora_id, len(self.lora_tasks) + 1)
        if task in self.engine.lora.cache.task_ids():
            return LoraRequest(task)
        from pathlib import Path

        from pipeline.convert.lora import load_peft_adapter, to_trtllm_lora

        try:
            converted = to_trtllm_lora(load_peft_adapter(Path(path)), self.engine.lora.layout.dtype)
        except PipelineError as error:
            raise ValueError(str(error)) from None
        return LoraRequest(task, converted.weights, converted.config)

    def _ignore(self, job):
        for name, neutral in IGNORED_ON_CPU.items():
            value = getattr(job, name.replace("sampling_param_", ""))
            if value is not None and value != neutral:
                with self.warned_lock:
                    first = name not in self.warned
                    self.warned.add(name)
                if first:
                    LOG.warning("reference runtime ignores %s=%s (no %s on the CPU runtime); logged once", name, value,
                                "best-of sampling" if name.endswith("best_of") else "sampling penalties")

    def submit(self, job, emit, fail):
        from pipeline.reference_runtime.completion import TextRules, completion
        from pipeline.reference_runtime.kv_cache import blocks_for
        from pipeline.reference_runtime.requests import GenerationRequest, RequestError
        from pipeline.reference_runtime.sampling import SamplingOptions

        self._ignore(job)
        prompt_ids = list(self.tokenizer(job.prompt, add_special_tokens=True)["input_ids"])
        top_k, top_p = job.top_k or 0, job.top_p or 0.0
        temperature = 1.0 if job.temperature is None else job.temperature
        if job.temperature is not None and job.temperature > 0 and top_k <= 0 and top_p <= 0:
            top_p = 1.0  # a temperature alone samples from the whole distribution, as the LLM API does
        sampling = SamplingOptions(temperature=temperature, top_k=top_k, top_p=top_p, seed=job.seed)
        request = GenerationRequest(input_ids=prompt_ids, max_new_tokens=job.max_tokens, sampling=sampling,
                                    # an event per token only where it is sent or stop strings are matched on the
                                    # text; else the final event alone, which carries every token
                                    streaming=job.streaming or bool(job.stop),
                                    return_log_probs=job.want["return_cumulative_logprob"], lora=self._lora(job.lora))
        rules = TextRules(streaming=job.streaming, include_prompt=not job.exclude_input, stop=tuple(job.stop))
        state = {"id": None, "ended": False, "cancel": False}
        lock = threading.Lock()
        tokens_per_block = self.limits.tokens_per_block

        # on the engine's one dispatcher thread, which every stream shares: each token decodes a window of the
        # last tokens (IncrementalText), never the whole output again
        text = IncrementalText(partial(self.tokenizer.decode, skip_special_tokens=True))

        def perf(event):
            blocks = blocks_for(len(prompt_ids) + len(event.tokens), tokens_per_block)
            return {**event.timings_ns, "kv_cache_reused_block": 0, "kv_cache_missed_block": blocks,
                    "kv_cache_alloc_new_blocks": blocks, "kv_cache_alloc_total_blocks": blocks,
                    "kv_cache_hit_rate": 0.0, "acceptance_rate": 0.0, "total_accepted_draft_tokens": 0,
                    "total_draft_tokens": 0}

        def on_event(event):  # the engine's dispatcher thread, in order
            if state["ended"]:
                return
            if event.error:
                state["ended"] = True
                fail(event.error)
                return
            reason = FINISH_REASONS.get(event.finish_reason, event.finish_reason) if event.finished else None
            done = completion(text.final if event.finished else text.value, rules, prompt_ids, event.tokens, reason)
            if not done.finished and not job.streaming:
                return
            state["ended"] = done.finished
            logprob = float(sum(event.logprobs)) if job.want["return_cumulative_logprob"] else None
            emit(Update(done.text, done.finished, done.finish_reason, done.stop_reason, logprob,
                        perf(event) if job.perf else None))
            if done.finished and not event.finished:  # a stop string: end it in the engine too
                with lock:
                    engine_id, state["cancel"] = state["id"], state["id"] is None
                if engine_id is not None:
                    threading.Thread(target=self.engine.cancel, args=(engine_id,), daemon=True).start()

        try:
            engine_id = self.engine.submit(request, on_event)
        except RequestError as error:
            raise ValueError(str(error)) from None
        with lock:
            state["id"], cancel = engine_id, state["cancel"]
        if cancel:  # stopped before submit returned
            self.engine.cancel(engine_id)
        return engine_id

    def abort(self, handle):
        self.engine.cancel(handle)

    def close(self):
        self.engine.close()


class _LlmApiEngine:
    """tensorrt_llm.LLM (the PyTorch backend) in the image: one asyncio loop thread runs generate_async."""

    def __init__(self, config):
        from tensorrt_llm import LLM
        from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict

        args = update_llm_args_with_extra_dict({}, config)
        LOG.info("tensorrt_llm: starting LLM(%s)", ", ".join(f"{k}={v!r}" for k, v in args.items()))
        self.llm = LLM(**args)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="llmapi-loop", daemon=True)
        self.thread.start()
        self.handles = {}  # handle -> RequestOutput, touched on the loop thread only
        self.aborted = set()  # aborted before generate_async started (loop thread only)
        # handles submitted and not ended; under `lock`. An abort of a handle that is not here (its request
        # ended while the abort was on its way: the responder polls a request until its final response is
        # sent) is dropped, so `aborted` never keeps a handle no _run will take out again.
        self.live = set()
        self.lock = threading.Lock()
        self.ids = iter(range(1, 1 << 62))

    def submit(self, job, emit, fail):
        from tensorrt_llm import SamplingParams

        params = SamplingParams(**job.sampling_kwargs())
        with self.lock:
            handle = next(self.ids)
            self.live.add(handle)
        future = asyncio.run_coroutine_threadsafe(self._run(handle, job, params, emit, fail), self.loop)
        future.add_done_callback(lambda f: not f.cancelled() and f.exception() and fail(str(f.exception())))
        return handle

    async def _run(self, handle, job, params, emit, fail):
        try:
            extra = {}
            if job.lora is not None:  # 1.1's generate_async(..., lora_request=LoRARequest)
                from tensorrt_llm.executor.request import LoRARequest

                name, lora_id, path, source = job.lora
                extra["lora_request"] = LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=path,
                                                    lora_ckpt_source=source)
            result = self.llm.generate_async(job.prompt, params, streaming=job.streaming, **extra)
            self.handles[handle] = result
            if handle in self.aborted:
                result.abort()
            async for output in result:
                if job.streaming or output.finished:
                    completion = output.outputs[0]
                    perf = _llmapi_perf(completion) if job.perf else None
                    emit(Update(completion.text, output.finished, completion.finish_reason if output.finished else None,
                                completion.stop_reason, completion.cumulative_logprob, perf))
        except Exception as error:  # noqa: BLE001 - the client gets it
            fail(str(error))
        finally:
            with self.lock:
                self.live.discard(handle)
            self.handles.pop(handle, None)
            self.aborted.discard(handle)

    def abort(self, handle):
        self.loop.call_soon_threadsafe(self._abort, handle)

    def _abort(self, handle):
        result = self.handles.get(handle)
        if result is not None:
            result.abort()
            return
        with self.lock:
            if handle in self.live:  # submitted, generate_async not started yet: _run aborts it when it does
                self.aborted.add(handle)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.llm.shutdown()


def _llmapi_perf(completion):
    metrics = getattr(completion, "request_perf_metrics", None)
    if not metrics:
        return {}
    kv, timing, spec = metrics.kv_cache_metrics, metrics.timing_metrics, metrics.speculative_decoding

    def ns(value):
        return int(value.total_seconds() * 1e9) if hasattr(value, "total_seconds") else int(value)

    return {"kv_cache_reused_block": kv.num_reused_blocks, "kv_cache_missed_block": kv.num_missed_blocks,
            "kv_cache_alloc_new_blocks": kv.num_new_allocated_blocks,
            "kv_cache_alloc_total_blocks": kv.num_total_allocated_blocks, "kv_cache_hit_rate": kv.kv_cache_hit_rate,
            "arrival_time_ns": ns(timing.arrival_time), "first_scheduled_time_ns": ns(timing.first_scheduled_time),
            "first_token_time_ns": ns(timing.first_token_time), "last_token_time_ns": ns(timing.last_token_time),
            "acceptance_rate": spec.acceptance_rate, "total_accepted_draft_tokens": spec.total_accepted_draft_tokens,
            "total_draft_tokens": spec.total_draft_tokens}


class _InFlight:
    """pipeline_requests_in_flight{model, version}: requests accepted and not yet answered with their final
    response, queued in the LLM API or running: the count the autoscaler reads (pipeline's
    data/k8s/scaling_rules.yaml; Triton's request duration cannot say it, as `execute` returns at once).
    Counted at the response sender, so whatever ends a request (answer, error, stop, cancellation) ends it."""

    def __init__(self, model, version):
        self.family = pb_utils.MetricFamily(name="pipeline_requests_in_flight", kind=pb_utils.MetricFamily.GAUGE,
                                            description="Requests accepted and not yet finished (queued or running)")
        self.gauge = self.family.Metric(labels={"model": model, "version": str(version)})
        self.lock = threading.Lock()
        self.count = 0

    def add(self, delta):
        with self.lock:
            self.count += delta
            self.gauge.set(self.count)

    def track(self, sender):
        self.add(1)
        return _CountedSender(sender, self)


class _CountedSender:
    """A response sender that takes its request off the in-flight count with the final response."""

    def __init__(self, sender, in_flight):
        self.sender, self.in_flight, self.open = sender, in_flight, True
        self.lock = threading.Lock()
        if hasattr(sender, "is_cancelled"):
            self.is_cancelled = sender.is_cancelled

    def send(self, response=None, flags=0):
        try:
            self.sender.send(response, flags=flags)
        finally:
            if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                with self.lock:
                    ended, self.open = self.open, False
                if ended:
                    self.in_flight.add(-1)

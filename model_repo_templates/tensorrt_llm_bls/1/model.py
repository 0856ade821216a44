"""tensorrt_llm_bls: preprocessing -> tensorrt_llm -> postprocessing in one Python model.

Written for this repository (tensor names follow NVIDIA's tensorrtllm_backend contract). Streaming
text is exact: for every streamed chunk the text so far is known incrementally (pipeline_model_support
IncrementalText: only the last tokens are decoded, through the postprocessing model, never the whole sequence
again) and only the new suffix is sent, holding back a trailing incomplete UTF-8 character, so the joined
chunks equal the non-streamed text, spaces and multi-byte characters included. accumulate_tokens=true sends
the whole text so far in each chunk instead of the suffix.
Text models only: the multimodal inputs are declared for client compatibility and refused.
In decoupled mode each instance takes up to `bls_concurrency` (the engine's max_batch_size) requests,
served on at most MAX_WORKERS worker threads (execute returns at once and a thread sends the responses);
requests beyond that wait, in order, for a thread. In non-decoupled mode the requests of one execute call
run on those threads too, and execute returns when all have answered. At unload (finalize) the requests
still waiting for a thread are answered with an UNAVAILABLE error; those running finish.
"""

import json
import math
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils
from pipeline_model_support import IncrementalText  # beside this file in the rendered repository

_TRUE = {"true", "1", "t", "y", "yes"}
# Worker threads per stub: each running request holds one while it streams (the responses of the BLS call to
# tensorrt_llm are read in a blocking loop). Bounded so that an engine with max_batch_size 1536 does not start
# 1536 threads in each of its stubs.
MAX_WORKERS = 128
_MULTIMODAL = ("image_input", "image_bytes_input", "image_url_input", "image_sizes_input", "video_bytes_input")
# BLS input -> preprocessing input
_TO_PRE = {
    "text_input": "QUERY", "decoder_text_input": "DECODER_QUERY", "max_tokens": "REQUEST_OUTPUT_LEN",
    "bad_words": "BAD_WORDS_DICT", "stop_words": "STOP_WORDS_DICT", "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
    "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS", "end_id": "END_ID", "pad_id": "PAD_ID",
    "prompt_table_extra_id": "PROMPT_TABLE_EXTRA_ID",
}
# preprocessing output -> tensorrt_llm input
_PRE_TO_LLM = {
    "INPUT_ID": "input_ids", "REQUEST_INPUT_LEN": "input_lengths", "REQUEST_OUTPUT_LEN": "request_output_len",
    "DECODER_INPUT_ID": "decoder_input_ids", "REQUEST_DECODER_INPUT_LEN": "decoder_input_lengths",
    "BAD_WORDS_IDS": "bad_words_list", "STOP_WORDS_IDS": "stop_words_list", "EMBEDDING_BIAS": "embedding_bias",
    "OUT_END_ID": "end_id", "OUT_PAD_ID": "pad_id", "OUT_PROMPT_TABLE_EXTRA_IDS": "prompt_table_extra_ids",
}
# BLS input -> tensorrt_llm input (passed through unchanged)
_TO_LLM = {
    "exclude_input_in_output": "exclude_input_in_output", "top_k": "runtime_top_k", "top_p": "runtime_top_p",
    "temperature": "temperature", "length_penalty": "len_penalty", "repetition_penalty": "repetition_penalty",
    "min_tokens": "min_tokens", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "seed": "seed", "return_log_probs": "return_log_probs", "return_context_logits": "return_context_logits",
    "return_generation_logits": "return_generation_logits", "num_return_sequences": "num_return_sequences",
    "beam_width": "beam_width", "stream": "streaming", "prompt_embedding_table": "prompt_embedding_table",
    "prompt_vocab_size": "prompt_vocab_size", "lora_task_id": "lora_task_id", "lora_weights": "lora_weights",
    "lora_config": "lora_config", "return_perf_metrics": "return_perf_metrics",
    "return_num_input_tokens": "return_num_input_tokens", "return_num_output_tokens": "return_num_output_tokens",
    "guided_decoding_guide_type": "guided_decoding_guide_type", "guided_decoding_guide": "guided_decoding_guide",
}
# tensorrt_llm outputs passed through to the client
_PASS_OUT = (
    "cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index", "sequence_index",
    "kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks", "arrival_time_ns",
    "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns", "acceptance_rate",
    "total_accepted_draft_tokens", "total_draft_tokens", "num_input_tokens", "num_output_tokens",
)


# The sampling values TensorRT-LLM's SamplingConfig refuses (and the reference runtime, which says the same),
# refused here before any work so both runtimes answer alike: input -> (is it valid, the rule).
_SAMPLING_RULES = {
    "temperature": (lambda v: v >= 0, "must be >= 0 (0 is greedy)"),
    "top_p": (lambda v: 0 <= v <= 1, "must be between 0 and 1 (0 turns it off)"),
    "top_k": (lambda v: v >= 0, "must be >= 0 (0 turns it off)"),
    "min_tokens": (lambda v: v >= 0, "must be >= 0"),
}


class BlsError(Exception):
    pass


def check_sampling(request):
    for name, (ok, rule) in _SAMPLING_RULES.items():
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        for value in [] if tensor is None else tensor.as_numpy().reshape(-1).tolist():
            if not (math.isfinite(value) and ok(value)):
                raise BlsError(f"{name} {rule}, got {value:g}.")


def _first(request, name, cast, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    values = [] if tensor is None else tensor.as_numpy().reshape(-1).tolist()
    return cast(values[0]) if values else default


def _first_words(pre):
    """The stop words preprocessing produced ([1, 2, N] word list) as token lists."""
    tensor = pb_utils.get_output_tensor_by_name(pre, "STOP_WORDS_IDS")
    if tensor is None:
        return []
    flat, offsets = tensor.as_numpy().reshape(2, -1)
    words, start = [], 0
    for end in offsets.tolist():
        if end < 0:
            break
        words.append([int(t) for t in flat[start:end]])
        start = end
    return words


class TritonPythonModel:
    def initialize(self, args):
        try:  # which Python this stub embeds (the image's, never the pipeline's venv)
            from transformers import __version__ as transformers_version
        except ImportError:
            transformers_version = "none"
        pb_utils.Logger.log_info(f"tensorrt_llm_bls: python prefix {sys.prefix}, transformers {transformers_version}, "
                                 f"executable {sys.executable}")
        self.model_config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self.model_config)
        parameters = self.model_config.get("parameters", {})
        self.accumulate = str(parameters.get("accumulate_tokens", {}).get("string_value", "")).lower() in _TRUE
        name = parameters.get("tensorrt_llm_model_name", {}).get("string_value", "")
        self.llm_model = name or "tensorrt_llm"
        self.draft_model = parameters.get("tensorrt_llm_draft_model_name", {}).get("string_value", "")
        concurrency = int(parameters.get("bls_concurrency", {}).get("string_value") or 1)
        self.closing = False
        self.workers = ThreadPoolExecutor(max_workers=max(1, min(concurrency, MAX_WORKERS)), thread_name_prefix="bls")
        if concurrency > MAX_WORKERS:
            pb_utils.Logger.log_info(f"tensorrt_llm_bls: {MAX_WORKERS} worker threads for bls_concurrency "
                                     f"{concurrency}; further requests wait for a thread")

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self.workers.submit(self._answer_decoupled, request, request.get_response_sender())
            return None
        return list(self.workers.map(self._answer, requests))

    def _answer(self, request, sender=None):
        try:
            return self._serve(request, sender)
        except Exception as error:  # noqa: BLE001 - the message goes back to the client
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error)))

    def _answer_decoupled(self, request, sender):
        if self.closing:  # queued when the model began to unload: answer rather than drop it (TritonError.UNAVAILABLE:
            # python_backend @f9088ff6 src/pb_stub.cc:1727)
            error = pb_utils.TritonError("tensorrt_llm_bls is unloading; send the request again",
                                         pb_utils.TritonError.UNAVAILABLE)
            sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        final = self._answer(request, sender)
        if final is not None:
            sender.send(final, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        # Every queued request still runs _answer_decoupled, which answers it at once now that closing is set.
        self.closing = True
        self.workers.shutdown(wait=True)

    # -- one request -------------------------------------------------------------------------------
    def _serve(self, request, sender):
        for name in _MULTIMODAL:
            if pb_utils.get_input_tensor_by_name(request, name) is not None:
                raise BlsError(f"Input '{name}' is not supported: this repository serves text-only models.")
        check_sampling(request)
        stream_tensor = pb_utils.get_input_tensor_by_name(request, "stream")
        streaming = bool(stream_tensor.as_numpy().reshape(-1)[0]) if stream_tensor is not None else False
        num_draft = _first(request, "num_draft_tokens", int, 0)
        if num_draft > 0:
            self._check_speculative(request, streaming)
        if streaming and not self.decoupled:
            raise BlsError("stream=true needs the decoupled transaction policy; render with --decoupled.")

        pre_inputs = []
        for source, target in _TO_PRE.items():
            tensor = pb_utils.get_input_tensor_by_name(request, source)
            if tensor is not None:
                pre_inputs.append(pb_utils.Tensor(target, tensor.as_numpy()))
        pre = self._exec("preprocessing", pre_inputs, ["INPUT_ID", "REQUEST_INPUT_LEN"] + [
            k for k in _PRE_TO_LLM if k not in ("INPUT_ID", "REQUEST_INPUT_LEN")])
        llm_inputs = []
        for source, target in _PRE_TO_LLM.items():
            tensor = pb_utils.get_output_tensor_by_name(pre, source)
            if tensor is not None:
                llm_inputs.append(pb_utils.Tensor(target, tensor.as_numpy()))
        for source, target in _TO_LLM.items():
            tensor = pb_utils.get_input_tensor_by_name(request, source)
            if tensor is not None:  # inputs with `reshape: []` arrive without their [1] dimension
                array = tensor.as_numpy()
                llm_inputs.append(pb_utils.Tensor(target, array.reshape(1, -1) if array.ndim == 1 else array))

        if num_draft > 0:
            ids, response = self._speculate(llm_inputs, num_draft, _first(request, "use_draft_logits", bool, False),
                                            _first(request, "max_tokens", int, 0),
                                            [w for w in _first_words(pre) if w])
            return self._text_response(self._detokenize(ids), response)
        llm_id = f"bls-{uuid.uuid4().hex}"
        llm_request = pb_utils.InferenceRequest(
            model_name=self.llm_model, inputs=llm_inputs, request_id=llm_id,
            requested_output_names=["output_ids", "sequence_length", *_PASS_OUT],
        )
        # per batch entry (tensorrt_llm answers each entry of a request batch separately, with batch_index)
        tokens, sent_text, last, texts = {}, {}, {}, {}
        # tensorrt_llm is rendered with the same transaction policy as this model
        responses = llm_request.exec(decoupled=True) if self.decoupled else [llm_request.exec()]
        for response in responses:
            if sender is not None and sender.is_cancelled():
                self._stop(llm_id)
                return None
            if response.has_error():
                raise BlsError(response.error().message())
            ids_tensor = pb_utils.get_output_tensor_by_name(response, "output_ids")
            if ids_tensor is None:  # the empty final flag of a decoupled stream
                continue
            index_tensor = pb_utils.get_output_tensor_by_name(response, "batch_index")
            entry = int(index_tensor.as_numpy().reshape(-1)[0]) if index_tensor is not None else 0
            lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)
            tokens.setdefault(entry, []).extend(ids_tensor.as_numpy().reshape(-1)[: int(lengths[0])].tolist())
            last[entry] = response
            if not streaming:
                continue
            text = texts.setdefault(entry, IncrementalText(self._detokenize)).value(tokens[entry])
            if text.endswith("\ufffd"):  # an incomplete character: wait for its next bytes
                continue
            delta = self._delta(text, sent_text.get(entry, ""), mid_stream=True)
            if delta:
                sender.send(self._text_response(delta, response))
                sent_text[entry] = text
        finals = []
        for entry in sorted(tokens) or [0]:
            text = texts[entry].final(tokens[entry]) if entry in texts else self._detokenize(tokens.get(entry, []))
            piece = text if not streaming else self._delta(text, sent_text.get(entry, ""))
            if piece or not streaming:
                finals.append(self._text_response(piece, last.get(entry)))
        for response in finals[:-1]:  # several entries: all but the last go out here (decoupled only)
            sender.send(response)
        return finals[-1] if finals else None

    # -- speculative decoding: NVIDIA's draft -> target loop -------------------------------------------
    def _check_speculative(self, request, streaming):
        """The limits and the error texts of NVIDIA's BLS (tensorrtllm_backend @c2e65b88
        all_models/inflight_batcher_llm/tensorrt_llm_bls/1/lib/decode.py:116-122, 269-273; model.py:184-194)."""
        if streaming:
            raise BlsError("streaming is not supported with speculative decoding")
        if _first(request, "return_context_logits", bool, False):
            raise BlsError("context logits are not supported with speculative decoding")
        if not self.draft_model:
            raise BlsError("cannot perform speculative decoding without draft model")
        text = pb_utils.get_input_tensor_by_name(request, "text_input")
        if text is not None and text.as_numpy().shape[0] > 1:
            raise BlsError("speculative decoding is not supported with batch size > 1")

    def _speculate(self, llm_inputs, num_draft, use_draft_logits, max_tokens, stop_words):
        """NVIDIA's loop (decode.py:296-380, triton_decoder.py:330-342, 431-493): each round the draft model
        writes k = min(num_draft_tokens, prompt + max_tokens - current - 1) tokens (min_tokens k), the target gets
        them as draft_input_ids with request_output_len k + 1; it ends at the length, when the target's output equals
        the draft's, when nothing changed, or on a stop word. Returns the final tokens and target response."""
        base = {t.name(): t.as_numpy() for t in llm_inputs if t.name() not in ("input_ids", "input_lengths",
                                                                                "request_output_len", "min_tokens")}
        prompt = self._ids(llm_inputs)
        ids, response, included = list(prompt), None, True
        while True:
            k = min(num_draft, len(prompt) + max_tokens - len(ids) - 1)
            draft_full, extra = None, {}
            if k > 0:
                draft_out, _, draft_included = self._llm(self.draft_model, base, ids, k,
                                                         {"min_tokens": np.array([[k]], dtype=np.int32),
                                                          "return_generation_logits": np.array([[use_draft_logits]])})
                new = draft_out[len(ids):] if draft_included else draft_out
                draft_full = ids + new
                if new:
                    extra["draft_input_ids"] = np.array([new], dtype=np.int32)
            out, response, included = self._llm(self.llm_model, base, ids, len(extra.get("draft_input_ids", [[]])[0]) + 1,
                                                extra)
            last, ids = ids, (out if included else ids + out)
            if (len(ids) >= len(prompt) + max_tokens or ids == draft_full or ids == last
                    or any(ids[-len(w):] == w for w in stop_words)):
                break
        return (ids if included else ids[len(prompt):]), response

    def _ids(self, llm_inputs):
        named = {t.name(): t.as_numpy() for t in llm_inputs}
        length = int(named["input_lengths"].reshape(-1)[0])
        return [int(t) for t in named["input_ids"].reshape(-1)[:length]]

    def _llm(self, model, base, ids, output_len, extra):
        """One non-streaming call of a tensorrt_llm model on `ids`: (output tokens, response, input included)."""
        inputs = [pb_utils.Tensor(name, value) for name, value in {**base, **extra}.items() if name != "streaming"]
        inputs += [pb_utils.Tensor("input_ids", np.array([ids], dtype=np.int32)),
                   pb_utils.Tensor("input_lengths", np.array([[len(ids)]], dtype=np.int32)),
                   pb_utils.Tensor("request_output_len", np.array([[output_len]], dtype=np.int32))]
        request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, request_id=f"bls-{uuid.uuid4().hex}",
                                            requested_output_names=["output_ids", "sequence_length", *_PASS_OUT])
        final = None
        for response in request.exec(decoupled=True) if self.decoupled else [request.exec()]:
            if response.has_error():
                raise BlsError(response.error().message())
            if pb_utils.get_output_tensor_by_name(response, "output_ids") is not None:
                final = response
        if final is None:
            raise BlsError(f"{model} sent no output_ids")
        length = int(pb_utils.get_output_tensor_by_name(final, "sequence_length").as_numpy().reshape(-1)[0])
        out = [int(t) for t in pb_utils.get_output_tensor_by_name(final, "output_ids").as_numpy().reshape(-1)[:length]]
        included = len(out) >= len(ids) and out[:len(ids)] == ids
        return out, final, included

    def _delta(self, text, sent, mid_stream=False):
        """What to send after `sent`: the new suffix (all of it with accumulate_tokens). Should the text so
        far stop extending what was sent, a mid-stream chunk resends it whole and the final one adds nothing."""
        if self.accumulate:
            return text
        if text.startswith(sent):
            return text[len(sent):]
        return text if mid_stream else ""

    def _stop(self, llm_id):
        """Cancel the running tensorrt_llm request (the `stop` input with its request id), so a client
        that went away frees its batch slot and KV-cache blocks."""
        one = np.array([[1]], dtype=np.int32)
        stop = pb_utils.InferenceRequest(
            model_name=self.llm_model, request_id=llm_id, requested_output_names=[],
            inputs=[pb_utils.Tensor("input_lengths", one), pb_utils.Tensor("request_output_len", one),
                    pb_utils.Tensor("stop", np.array([[True]]))],
        )
        for _ in stop.exec(decoupled=True) if self.decoupled else [stop.exec()]:
            pass

    def _detokenize(self, tokens):
        if not tokens:
            return ""
        post = self._exec(
            "postprocessing",
            [
                pb_utils.Tensor("TOKENS_BATCH", np.array(tokens, dtype=np.int32).reshape(1, 1, -1)),
                pb_utils.Tensor("SEQUENCE_LENGTH", np.array([[len(tokens)]], dtype=np.int32)),
            ],
            ["OUTPUT"],
        )
        value = pb_utils.get_output_tensor_by_name(post, "OUTPUT").as_numpy().reshape(-1)[0]
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    def _exec(self, model, inputs, outputs):
        response = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs).exec()
        if response.has_error():
            message = response.error().message()
            raise BlsError(message if message.startswith(f"{model}:") else f"{model}: {message}")
        return response

    def _text_response(self, text, llm_response):
        # flat [beams], as NVIDIA's BLS passes postprocessing's OUTPUT on
        tensors = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=object))]
        if llm_response is not None:
            for name in _PASS_OUT:
                tensor = pb_utils.get_output_tensor_by_name(llm_response, name)
                if tensor is not None:
                    tensors.append(pb_utils.Tensor(name, tensor.as_numpy()))
        return pb_utils.InferenceResponse(output_tensors=tensors)

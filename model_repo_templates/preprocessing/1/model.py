"""preprocessing: text prompt -> token ids and the word lists TensorRT-LLM expects.

Written for this repository (tensor names follow NVIDIA's tensorrtllm_backend contract). Text only:
DECODER_QUERY (encoder-decoder models) is tokenized; multimodal inputs are not part of this model.
Needs only numpy, transformers and the Triton Python backend utilities.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer

_TRUE = {"true", "1", "t", "y", "yes"}
_FALSE = {"false", "0", "f", "n", "no"}


def _flag(parameters, key, default):
    value = str(parameters.get(key, {}).get("string_value", "")).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return default


def _scalar(request, name, dtype):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    return None if array.size == 0 else dtype(array.reshape(-1)[0])


def _strings(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    out = []
    for item in tensor.as_numpy().reshape(-1):
        out.append(item.decode("utf-8") if isinstance(item, bytes) else str(item))
    return out


def word_list(tokenizer, words):
    """Words -> int32 [1, 2, N]: row 0 the concatenated ids, row 1 the end offsets padded with -1."""
    flat, offsets = [], []
    for word in words:
        if not word:
            continue
        ids = tokenizer.encode(word, add_special_tokens=False)
        if not ids:
            continue
        flat.extend(ids)
        offsets.append(len(flat))
    width = max(1, len(flat))
    out = np.zeros((1, 2, width), dtype=np.int32)
    out[0, 1, :] = -1
    out[0, 0, : len(flat)] = flat
    out[0, 1, : len(offsets)] = offsets
    return out


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        tokenizer_dir = parameters["tokenizer_dir"]["string_value"]
        self.add_special_tokens = _flag(parameters, "add_special_tokens", True)
        # the engine's prompt limit, enforced here so an over-long prompt never reaches tensorrt_llm (0: none)
        self.max_input_len = int(parameters.get("max_input_len", {}).get("string_value") or 0)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, trust_remote_code=False)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.end_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(pb_utils.InferenceResponse(output_tensors=self._one(request)))
            except Exception as error:  # noqa: BLE001 - the message goes back to the client
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {error}")))
        return responses

    def _one(self, request):
        query = _strings(request, "QUERY")
        if not query:
            raise ValueError("QUERY (text_input) is empty")
        for name in ("IMAGE_BYTES", "IMAGE_URL", "IMAGE_SIZES", "VIDEO_BYTES"):
            if pb_utils.get_input_tensor_by_name(request, name) is not None:
                raise ValueError(f"{name} is not supported: this repository serves text-only models")
        ids = self.tokenizer.encode(query[0], add_special_tokens=self.add_special_tokens)
        if self.max_input_len and len(ids) > self.max_input_len:
            raise ValueError(
                f"Prompt has {len(ids)} tokens, more than this engine's max_input_len {self.max_input_len}. "
                "Shorten the prompt or build the engine with a larger max_input_len."
            )
        outputs = [
            pb_utils.Tensor("INPUT_ID", np.array([ids], dtype=np.int32)),
            pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[len(ids)]], dtype=np.int32)),
        ]
        request_output_len = _scalar(request, "REQUEST_OUTPUT_LEN", int)
        if request_output_len is None:
            raise ValueError("REQUEST_OUTPUT_LEN (max_tokens) is required")
        outputs.append(pb_utils.Tensor("REQUEST_OUTPUT_LEN", np.array([[request_output_len]], dtype=np.int32)))
        # Every declared output is produced, as NVIDIA's preprocessing does (its end_to_end_test reads
        # them all): a decoder-only request gets [[pad_id]] / [[1]] decoder inputs (TensorRT-LLM ignores
        # them for decoder-only models), no words -> [1, 2, 0], no bias -> [1, 0].
        decoder_query = _strings(request, "DECODER_QUERY")
        decoder_ids = self.tokenizer.encode(decoder_query[0], add_special_tokens=False) if decoder_query else []
        pad_id = _scalar(request, "PAD_ID", int)
        pad_id = self.pad_id if pad_id is None else pad_id
        decoder_ids = decoder_ids or [pad_id]
        outputs.append(pb_utils.Tensor("DECODER_INPUT_ID", np.array([decoder_ids], dtype=np.int32)))
        outputs.append(pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", np.array([[len(decoder_ids)]], dtype=np.int32)))
        for source, target in (("BAD_WORDS_DICT", "BAD_WORDS_IDS"), ("STOP_WORDS_DICT", "STOP_WORDS_IDS")):
            words = _strings(request, source)
            words = words if words and any(words) else []
            outputs.append(pb_utils.Tensor(target, word_list(self.tokenizer, words) if words else
                                           np.empty((1, 2, 0), dtype=np.int32)))
        bias_words = _strings(request, "EMBEDDING_BIAS_WORDS")
        bias = np.empty((1, 0), dtype=np.float32)
        if bias_words and any(bias_words):
            weights_tensor = pb_utils.get_input_tensor_by_name(request, "EMBEDDING_BIAS_WEIGHTS")
            weights = [] if weights_tensor is None else weights_tensor.as_numpy().reshape(-1).tolist()
            if len(weights) != len(bias_words):
                raise ValueError("EMBEDDING_BIAS_WORDS and EMBEDDING_BIAS_WEIGHTS must have the same length")
            bias = np.zeros((1, len(self.tokenizer)), dtype=np.float32)
            for word, weight in zip(bias_words, weights):
                for token in self.tokenizer.encode(word, add_special_tokens=False):
                    bias[0, token] += weight
        outputs.append(pb_utils.Tensor("EMBEDDING_BIAS", bias))
        end_id = _scalar(request, "END_ID", int)
        outputs.append(pb_utils.Tensor("OUT_END_ID", np.array([[self.end_id if end_id is None else end_id]], dtype=np.int32)))
        outputs.append(pb_utils.Tensor("OUT_PAD_ID", np.array([[pad_id]], dtype=np.int32)))
        extra = pb_utils.get_input_tensor_by_name(request, "PROMPT_TABLE_EXTRA_ID")
        if extra is not None:
            value = int(extra.as_numpy().reshape(-1)[0])
            outputs.append(pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", np.full((1, len(ids)), value, dtype=np.uint64)))
        return outputs

    def finalize(self):
        self.tokenizer = None

"""preprocessing: text prompt -> token ids and the word lists TensorRT-LLM expects.

Written for this repository (tensor names follow NVIDIA's tensorrtllm_backend contract). Text only:
DECODER_QUERY (encoder-decoder models) is tokenized; multimodal inputs are not part of this model.
Needs only numpy, transformers and the Triton Python backend utilities.
"""

import json
import sys

import numpy as np
import transformers
import triton_python_backend_utils as pb_utils
from pipeline_model_support import flag  # beside this file in the rendered repository
from transformers import AutoTokenizer



def _rows(request, name, batch):
    """The tensor's rows, one per batch entry ([B, ...]); a single row is shared by every entry; None if absent."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    if array.ndim == 0 or array.shape[0] not in (1, batch):
        raise ValueError(f"{name} has batch size {array.shape[0] if array.ndim else 0}, QUERY has {batch}")
    return [array[min(b, array.shape[0] - 1)] for b in range(batch)]


def _texts(row):
    return [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in np.asarray(row).reshape(-1)]


def _int(row):
    return None if row is None or np.asarray(row).size == 0 else int(np.asarray(row).reshape(-1)[0])


def word_lists(tokenizer, rows):
    """Words per batch entry -> int32 [B, 2, N]: row 0 the concatenated ids, row 1 the end offsets padded
    with -1. No words at all -> [B, 2, 0], as NVIDIA's preprocessing sends."""
    flats, offsets = [], []
    for words in rows:
        flat, ends = [], []
        for word in words:
            ids = tokenizer.encode(word, add_special_tokens=False) if word else []
            if ids:
                flat.extend(ids)
                ends.append(len(flat))
        flats.append(flat)
        offsets.append(ends)
    if not any(flats):
        return np.empty((len(rows), 2, 0), dtype=np.int32)
    width = max(len(flat) for flat in flats)
    out = np.zeros((len(rows), 2, width), dtype=np.int32)
    out[:, 1, :] = -1
    for b, (flat, ends) in enumerate(zip(flats, offsets)):
        out[b, 0, : len(flat)] = flat
        out[b, 1, : len(ends)] = ends
    return out


def _padded(sequences, pad_ids):
    width = max(len(seq) for seq in sequences)
    out = np.empty((len(sequences), width), dtype=np.int32)
    for b, (seq, pad) in enumerate(zip(sequences, pad_ids)):
        out[b] = list(seq) + [pad] * (width - len(seq))
    return out


class TritonPythonModel:
    def initialize(self, args):
        # which Python this stub embeds (the image's, never the pipeline's venv)
        pb_utils.Logger.log_info(f"preprocessing: python prefix {sys.prefix}, transformers {transformers.__version__}, "
                                 f"executable {sys.executable}")
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        tokenizer_dir = parameters["tokenizer_dir"]["string_value"]
        self.add_special_tokens = flag(parameters, "add_special_tokens", True)
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
        """One request of B prompts (QUERY [B, 1]) -> every output NVIDIA's preprocessing declares, [B, ...]."""
        query_tensor = pb_utils.get_input_tensor_by_name(request, "QUERY")
        queries = [] if query_tensor is None else [_texts(row)[0] for row in query_tensor.as_numpy()]
        if not queries:
            raise ValueError("QUERY (text_input) is empty")
        batch = len(queries)
        for name in ("IMAGE_BYTES", "IMAGE_URL", "IMAGE_SIZES", "VIDEO_BYTES"):
            if pb_utils.get_input_tensor_by_name(request, name) is not None:
                raise ValueError(f"{name} is not supported: this repository serves text-only models")
        ids = [self.tokenizer.encode(query, add_special_tokens=self.add_special_tokens) for query in queries]
        longest = max(len(seq) for seq in ids)
        if self.max_input_len and longest > self.max_input_len:
            raise ValueError(
                f"Prompt has {longest} tokens, more than this engine's max_input_len {self.max_input_len}. "
                "Shorten the prompt or build the engine with a larger max_input_len."
            )
        output_lens = _rows(request, "REQUEST_OUTPUT_LEN", batch)
        if output_lens is None or any(_int(row) is None for row in output_lens):
            raise ValueError("REQUEST_OUTPUT_LEN (max_tokens) is required")
        end_rows, pad_rows = _rows(request, "END_ID", batch), _rows(request, "PAD_ID", batch)
        end_ids = [self.end_id if end_rows is None or _int(r) is None else _int(r) for r in end_rows or [None] * batch]
        pad_ids = [self.pad_id if pad_rows is None or _int(r) is None else _int(r) for r in pad_rows or [None] * batch]
        # Every declared output is produced, as NVIDIA's preprocessing does (its end_to_end_test reads
        # them all): decoder-only requests get [[pad_id]] / [[1]] decoder inputs (TensorRT-LLM ignores
        # them for decoder-only models), no words -> [B, 2, 0], no bias -> [B, 0].
        decoder_rows = _rows(request, "DECODER_QUERY", batch)
        decoder_ids = [
            (self.tokenizer.encode(_texts(row)[0], add_special_tokens=False) if row is not None else []) or [pad]
            for row, pad in zip(decoder_rows or [None] * batch, pad_ids)
        ]
        outputs = [
            pb_utils.Tensor("INPUT_ID", _padded(ids, pad_ids)),
            pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[len(seq)] for seq in ids], dtype=np.int32)),
            pb_utils.Tensor("DECODER_INPUT_ID", _padded(decoder_ids, pad_ids)),
            pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", np.array([[len(seq)] for seq in decoder_ids], dtype=np.int32)),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", np.array([[_int(row)] for row in output_lens], dtype=np.int32)),
        ]
        for source, target in (("BAD_WORDS_DICT", "BAD_WORDS_IDS"), ("STOP_WORDS_DICT", "STOP_WORDS_IDS")):
            rows = _rows(request, source, batch)
            outputs.append(pb_utils.Tensor(target, word_lists(self.tokenizer, [
                [word for word in _texts(row) if word] for row in rows or [[]] * batch])))
        outputs.append(pb_utils.Tensor("EMBEDDING_BIAS", self._embedding_bias(request, batch)))
        outputs.append(pb_utils.Tensor("OUT_END_ID", np.array([[value] for value in end_ids], dtype=np.int32)))
        outputs.append(pb_utils.Tensor("OUT_PAD_ID", np.array([[value] for value in pad_ids], dtype=np.int32)))
        extra = _rows(request, "PROMPT_TABLE_EXTRA_ID", batch)
        if extra is not None:
            width = max(len(seq) for seq in ids)
            outputs.append(pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", np.array(
                [[_int(row)] * width for row in extra], dtype=np.uint64)))
        return outputs

    def _embedding_bias(self, request, batch):
        words_rows = _rows(request, "EMBEDDING_BIAS_WORDS", batch)
        if words_rows is None or not any(any(_texts(row)) for row in words_rows):
            return np.empty((batch, 0), dtype=np.float32)
        weight_rows = _rows(request, "EMBEDDING_BIAS_WEIGHTS", batch) or [np.empty(0)] * batch
        bias = np.zeros((batch, len(self.tokenizer)), dtype=np.float32)
        for b, (words_row, weights_row) in enumerate(zip(words_rows, weight_rows)):
            words, weights = _texts(words_row), np.asarray(weights_row).reshape(-1).tolist()
            if len(weights) != len(words):
                raise ValueError("EMBEDDING_BIAS_WORDS and EMBEDDING_BIAS_WEIGHTS must have the same length")
            for word, weight in zip(words, weights):
                for token in self.tokenizer.encode(word, add_special_tokens=False):
                    bias[b, token] += weight
        return bias

    def finalize(self):
        self.tokenizer = None

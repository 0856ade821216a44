"""postprocessing: token ids -> text, decoded as a continuation.

Written for this repository (tensor names follow NVIDIA's tensorrtllm_backend contract). Each batch
entry's ids are decoded after a fixed anchor token and the anchor's own text is cut off again, so a
streamed chunk keeps its leading space (a plain per-chunk decode drops it for SentencePiece
tokenizers) and a whole output decodes to the same text as its chunks joined.

Limit: this model is stateless, so a character whose UTF-8 bytes span two streamed chunks cannot be
joined here; such a chunk ends (or starts) with U+FFFD. The tensorrt_llm_bls model streams exact
text in that case (it keeps the text so far, decoding the last tokens incrementally, and sends the new suffix).
"""

import json
import sys

import numpy as np
import transformers
import triton_python_backend_utils as pb_utils
from pipeline_model_support import flag  # beside this file in the rendered repository
from transformers import AutoTokenizer



class ContinuationDecoder:
    """decode(ids) as the text these ids add after earlier text."""

    def __init__(self, tokenizer, skip_special_tokens=True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.anchor = tokenizer.encode("a", add_special_tokens=False)[-1:]
        self.anchor_text = tokenizer.decode(self.anchor, skip_special_tokens=skip_special_tokens)

    def decode(self, ids):
        if not len(ids):
            return ""
        text = self.tokenizer.decode(self.anchor + list(ids), skip_special_tokens=self.skip_special_tokens)
        if text.startswith(self.anchor_text):
            return text[len(self.anchor_text):]
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens)


class TritonPythonModel:
    def initialize(self, args):
        # which Python this stub embeds (the image's, never the pipeline's venv)
        pb_utils.Logger.log_info(f"postprocessing: python prefix {sys.prefix}, transformers {transformers.__version__}, "
                                 f"executable {sys.executable}")
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        tokenizer = AutoTokenizer.from_pretrained(parameters["tokenizer_dir"]["string_value"], trust_remote_code=False)
        self.decoder = ContinuationDecoder(tokenizer, flag(parameters, "skip_special_tokens", True))

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
                lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()
                texts = self._decode(tokens, lengths)
                output = pb_utils.Tensor("OUTPUT", np.array(texts, dtype=object))
                responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
            except Exception as error:  # noqa: BLE001
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"postprocessing: {error}")))
        return responses

    def _decode(self, tokens, lengths):
        """tokens [batch, beams, len] (or [batch, len]); lengths [batch, beams] (or [batch]).
        Returns batch x beams UTF-8 strings as one flat list, the shape NVIDIA's postprocessing gives
        OUTPUT (clients read `as_numpy("text_output")[0]` as the first beam's bytes)."""
        if tokens.ndim == 2:
            tokens = tokens[:, None, :]
        lengths = lengths.reshape(tokens.shape[0], -1)
        out = []
        for b in range(tokens.shape[0]):
            for beam in range(tokens.shape[1]):
                n = int(lengths[b, beam]) if beam < lengths.shape[1] else tokens.shape[2]
                out.append(self.decoder.decode(tokens[b, beam, :n].tolist()).encode("utf-8"))
        return out

    def finalize(self):
        self.decoder = None

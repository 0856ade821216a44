"""What the Python models of a rendered repository share; render copies this file beside each model.py.

Why a file in the repository rather than an import of `pipeline`: preprocessing, postprocessing, BLS and the
LLM-API model run in the image's Python, where the pipeline is not installed (pipeline/core/tool_env.py; README
"Whose Python runs what"). The Python backend's stub puts a model's version folder (`<model>/1`, where model.py
is) on sys.path before it imports model.py (python_backend @f9088ff6 src/pb_stub.cc:2061-2068,
ModelContext::StubSetup), so `import pipeline_model_support` there finds this copy, and a bundle or a moved
repository carries it with the model. Needs only the standard library (and the stub's
triton_python_backend_utils when a log record is written).
"""

import logging

_TRUE = {"true", "1", "t", "y", "yes"}
_FALSE = {"false", "0", "f", "n", "no"}
_INCOMPLETE = "\ufffd"  # what a decode writes for the bytes of a character whose last token has not come yet


def flag(parameters, key, default):
    """A boolean config.pbtxt parameter (`parameters` as the stub's model_config JSON has them); default when the
    key is absent or says neither true nor false."""
    value = str(parameters.get(key, {}).get("string_value", "")).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return default


class TritonLogHandler(logging.Handler):
    """Python log records into the server log, through Triton's own logger, at their level."""

    def __init__(self, prefix=""):
        super().__init__()
        self.prefix = prefix

    def emit(self, record):
        import triton_python_backend_utils as pb_utils

        message = self.prefix + self.format(record)
        if record.levelno >= logging.ERROR:
            pb_utils.Logger.log_error(message)
        elif record.levelno >= logging.WARNING:
            pb_utils.Logger.log_warn(message)
        else:
            pb_utils.Logger.log_info(message)


class IncrementalText:
    """The text of a growing token sequence, decoding only its last tokens each time it grows.

    `decode(ids)` decodes a list of ids. Two offsets are kept: `prefix` (where the window decoded each time
    starts) and `read` (the tokens whose text is already in `text`). The new text is decode(window) less
    decode(window up to read): decoding from a token before the new ones keeps the context a tokenizer needs (a
    SentencePiece word's leading space, a character whose bytes span tokens). While the window's text ends with
    U+FFFD (a character not complete yet) the offsets stay where they are, so the next token decodes the whole
    character. Should a tokenizer's decode of the window not extend its decode up to `read` (a clean-up rule
    that looks further back; byte fallback, which writes U+FFFD for every byte of a run of byte tokens that does
    not decode), the whole sequence is decoded instead, so a complete text always equals decode(ids).
    """

    def __init__(self, decode):
        self.decode = decode
        self.ids = []
        self.text = ""  # decode(ids[:read])
        self.prefix = self.read = 0

    def value(self, ids):
        """decode(ids), incremental when `ids` extends the ids of the last call (else decoded whole). While the
        last character is incomplete (the decode ends with U+FFFD) it is the text before it and U+FFFD."""
        ids = list(ids)
        if ids[:len(self.ids)] != self.ids:
            self.text, self.prefix, self.read = "", 0, 0
        self.ids = ids
        if self.read == len(ids):
            return self.text
        before = self.decode(ids[self.prefix:self.read]) if self.read > self.prefix else ""
        window = self.decode(ids[self.prefix:])
        if window.endswith(_INCOMPLETE):  # wait for the character's next tokens; nothing is taken as read
            return self.text + (window[len(before):] if window.startswith(before) else _INCOMPLETE)
        if window.startswith(before):
            self.text += window[len(before):]
        else:
            self.text = self.decode(ids)
        self.prefix, self.read = self.read, len(ids)
        return self.text

    def final(self, ids):
        """The text of a sequence that has ended: value(ids), or, should it end in an incomplete character,
        decode(ids) itself (what a tokenizer writes for those bytes is its own; decoded whole, once)."""
        text = self.value(ids)
        return self.decode(list(ids)) if text.endswith(_INCOMPLETE) else text

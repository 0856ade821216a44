"""model_repo_templates/pipeline_model_support.py: what the rendered Python models share.

IncrementalText must give, after every token that completes a character, the text a full decode of the tokens so
far gives (and say "incomplete", a trailing U+FFFD, where a full decode does), while decoding
only a window of the last tokens (the reference LLM-API path and BLS stream through it). Checked on a tiny
SentencePiece-style tokenizer with byte fallback, so a character missing from the vocabulary is split into one
token per UTF-8 byte, and its leading-space rule (Metaspace) applies."""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[3] / "model_repo_templates" / "pipeline_model_support.py"
TEXTS = ["Hello world, ça va? 日本語 und Grüße 🙂🙂 end", "éé 🙂x y", "  two  spaces 語"]


def _support():
    spec = importlib.util.spec_from_file_location("pipeline_model_support_under_test", SUPPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    pieces = ("▁", "▁Hello", "▁world", ",", "▁ça", "▁va", "?", "▁und", "▁end", *"HelowrdaxytspcnuGß")
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    return backend


def test_incremental_text_equals_a_full_decode_after_every_token(tokenizer) -> None:
    support = _support()
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert tokenizer.decode(ids) == text
        assert any(tokenizer.id_to_token(i).startswith("<0x") for i in ids)  # characters split into byte tokens
        windows = []
        incremental = support.IncrementalText(lambda part: windows.append(len(part)) or tokenizer.decode(part))
        complete = 0
        for n in range(1, len(ids) + 1):
            full, got = tokenizer.decode(ids[:n]), incremental.value(ids[:n])
            if full.endswith("\ufffd"):  # mid-character: byte fallback writes U+FFFD for the bytes so far (for
                # all of a run of byte tokens, even its complete characters); both say "incomplete"
                assert got.endswith("\ufffd") and text.startswith(got.rstrip("\ufffd")), (text, n)
            else:
                assert got == full, (text, n)
                complete += 1
        assert got == text and complete > len(ids) // 2
        for n in range(1, len(ids) + 1):  # a sequence that ends, mid-character or not: exactly a full decode
            ended = support.IncrementalText(tokenizer.decode)
            for m in range(1, n):
                ended.value(ids[:m])
            assert ended.final(ids[:n]) == tokenizer.decode(ids[:n]), (text, n)
        assert max(windows) <= 8 < len(ids)  # a window of the last tokens, never the whole sequence again


def test_incremental_text_starts_again_when_the_ids_do_not_extend_the_last_ones(tokenizer) -> None:
    incremental = _support().IncrementalText(tokenizer.decode)
    first, second = tokenizer.encode(TEXTS[0]).ids, tokenizer.encode(TEXTS[1]).ids
    assert incremental.value(first) == TEXTS[0]
    assert incremental.value(second) == TEXTS[1]
    assert incremental.value([]) == ""


def test_flag_and_log_handler(monkeypatch) -> None:
    support = _support()
    parameters = {"on": {"string_value": " Yes"}, "off": {"string_value": "0"}, "odd": {"string_value": "maybe"}}
    assert [support.flag(parameters, key, None) for key in ("on", "off", "odd", "absent")] == [True, False, None, None]
    lines = []
    logger = types.SimpleNamespace(log_error=lambda m: lines.append(("error", m)),
                                   log_warn=lambda m: lines.append(("warn", m)),
                                   log_info=lambda m: lines.append(("info", m)))
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.SimpleNamespace(Logger=logger))
    log = logging.getLogger("test_model_support")
    log.addHandler(support.TritonLogHandler("p: "))
    log.setLevel(logging.INFO)
    log.info("a")
    log.warning("b")
    log.error("c")
    assert lines == [("info", "p: a"), ("warn", "p: b"), ("error", "p: c")]

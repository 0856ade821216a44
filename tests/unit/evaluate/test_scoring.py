"""pipeline.evaluate.scoring without a model: the evaluation texts (shipped and the user's) and the
relative change. Scoring a real model is tests/unit/evaluate/test_model.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from pipeline.core.errors import InvalidInputError
from pipeline.evaluate.scoring import EVAL_DATA, load_eval_texts, relative_delta


def test_shipped_eval_set_is_varied_and_large_enough():
    records = [json.loads(line) for line in EVAL_DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds = {r["kind"] for r in records}
    assert {"prose", "code", "dialogue", "facts", "numbers"} <= kinds
    assert len(records) >= 30
    assert len({r["text"] for r in records}) == len(records)
    assert load_eval_texts() == [r["text"] for r in records]


def _shingles(text: str, n: int = 8) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_eval_set_is_distinct_from_the_calibration_set():
    from pipeline.quantization.calibration import load_calibration

    calibration = load_calibration(None, size=10**6).texts
    assert calibration, "the shipped calibration set is empty"
    calib_shingles: set[tuple[str, ...]] = set()
    for text in calibration:
        calib_shingles |= _shingles(text)
    for text in load_eval_texts():
        assert text not in calibration
        shared = _shingles(text) & calib_shingles
        assert not shared, f"eval text shares 8-word runs with the calibration set: {sorted(shared)[:2]}"


def test_txt_and_jsonl_user_data(tmp_path: Path):
    txt = tmp_path / "d.txt"
    txt.write_text("First paragraph\nstill first.\n\n\nSecond one.\r\n\r\nThird.\n", encoding="utf-8")
    assert load_eval_texts(txt) == ["First paragraph\nstill first.", "Second one.", "Third."]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"text": "a b c"}\n\n"just a string"\n', encoding="utf-8")
    assert load_eval_texts(jsonl) == ["a b c", "just a string"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", '{"text": "ok"}\n{not json\n', "bad.jsonl:2 is not valid JSON"),
        ("nofield.jsonl", '{"body": "x"}\n', 'no string "text" field'),
        ("empty.txt", "\n\n  \n", "holds no text"),
        ("missing.txt", None, "does not exist"),
    ],
)
def test_bad_user_data_is_refused(tmp_path: Path, name: str, content: str | None, message: str):
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        load_eval_texts(path)


def test_non_utf8_data_is_refused(tmp_path: Path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        load_eval_texts(path)


def test_relative_delta():
    assert math.isclose(relative_delta(12.5, 10.0), 0.25)
    assert relative_delta(10.0, 10.0) == 0.0
    assert relative_delta(float("inf"), 10.0) == float("inf")
    assert relative_delta(float("nan"), 10.0) == float("inf")

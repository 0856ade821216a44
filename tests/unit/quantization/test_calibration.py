"""Calibration data: the shipped set and the user's files and folders."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pipeline.quantization.calibration import load_calibration, shipped_path
from pipeline.core.errors import InvalidInputError


def test_shipped_set_is_a_few_hundred_varied_samples() -> None:
    rows = [json.loads(line) for line in shipped_path().read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 250
    kinds = Counter(row["kind"] for row in rows)
    assert set(kinds) == {"chat", "code", "prose", "math", "multilingual", "instruction"}
    assert min(kinds.values()) >= 40
    assert len({row["text"] for row in rows}) == len(rows), "duplicate samples"
    # Interleaved: even a small prefix covers every kind.
    assert {row["kind"] for row in rows[:12]} == set(kinds)
    # Several scripts, not only Latin.
    text = "".join(row["text"] for row in rows)
    for sample in ("東京", "Москва", "القاهرة", "서울", "भारत"):
        assert sample in text


def test_shipped_selection_is_a_stable_prefix_with_its_hash() -> None:
    small, large = load_calibration(None, 8), load_calibration(None, 64)
    assert small.size == 8 and large.size == 64 and small.available == large.available >= 250
    assert small.texts == large.texts[:8]
    assert small.source == "shipped:mixed-v1.jsonl"
    assert small.sha256 != large.sha256
    assert load_calibration(None, 8).sha256 == small.sha256
    assert load_calibration(None, 10_000).size == small.available


def test_txt_lines_and_jsonl_text_field(tmp_path: Path) -> None:
    txt = tmp_path / "calib.txt"
    txt.write_text("first line\n\n  second line  \nthird\n", encoding="utf-8")
    got = load_calibration(txt, 2)
    assert got.texts == ("first line", "second line") and got.available == 3 and got.source == str(txt.resolve())

    jsonl = tmp_path / "calib.jsonl"
    jsonl.write_text('{"text": "alpha"}\n\n{"text": "beta", "id": 2}\n', encoding="utf-8")
    assert load_calibration(jsonl, 10).texts == ("alpha", "beta")


def test_dataset_folder_prefers_the_train_split(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train-00000.jsonl").write_text('{"text": "train sample"}\n', encoding="utf-8")
    (folder / "data" / "test-00000.jsonl").write_text('{"text": "test sample"}\n', encoding="utf-8")
    (folder / "dataset_info.json").write_text('{"features": {}}', encoding="utf-8")
    assert load_calibration(folder, 10).texts == ("train sample",)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.txt", "", "holds no text samples"),
        ("blank.txt", "\n   \n\n", "holds no text samples"),
        ("empty.jsonl", "\n", "holds no text samples"),
        ("notext.jsonl", '{"prompt": "x"}\n', "has no string `text` field"),
        ("broken.jsonl", '{"text": \n', "is not valid JSON"),
        ("data.csv", "text\nhello\n", "unsupported type .csv"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidInputError, match=message.replace(".", r"\.").replace("`", "`")) as caught:
        load_calibration(path, 8)
    assert caught.value.exit_code == 2 and caught.value.hint


def test_arrow_dataset_folder_is_refused_with_an_export_hint(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "data-00000-of-00001.arrow").write_bytes(b"\xff\xff\xff\xff")
    (folder / "state.json").write_text("{}", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="Arrow") as caught:
        load_calibration(folder, 8)
    assert "to_json" in (caught.value.hint or "")


def test_missing_path_and_bad_size(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_calibration(tmp_path / "nope.txt", 8)
    with pytest.raises(InvalidInputError, match="at least 1"):
        load_calibration(None, 0)

"""evaluate without a model: evaluation data, the gate, reports, the checkpoint manifest record, CLI refusals."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest

from pipeline.artifacts import build_manifest, read_manifest, sha256_json, write_json_atomic
from pipeline.cli import run
from pipeline.errors import GateFailedError, InvalidInputError
from pipeline.evaluate import (
    EVAL_DATA,
    EvaluateResult,
    EvaluateSpec,
    FormatResult,
    apply_gate,
    check_gate,
    load_eval_texts,
    markdown_table,
    record_in_manifest,
    relative_delta,
    write_reports,
)
from pipeline.simulated import Variant


def _row(name: str, ppl: float, agreement: float = 0.9, **extra) -> FormatResult:
    quant, _, kv = name.partition("+kv_")
    return FormatResult(
        name=name, quant=quant, kv_cache=kv or "auto", simulation="test", perplexity=ppl,
        delta=relative_delta(ppl, 10.0), top1_agreement=agreement, top1_accuracy=0.4, tokens=100, **extra,
    )


def _result(tmp_path: Path, max_delta: float = 0.1) -> EvaluateResult:
    baseline = FormatResult(name="baseline", quant="float32", kv_cache="auto", simulation="test", perplexity=10.0,
                            delta=0.0, top1_agreement=1.0, top1_accuracy=0.4, tokens=100)
    result = EvaluateResult(
        model="m", hf_dir=tmp_path, dataset={"name": "d", "sha256": "0" * 64, "texts": 3, "windows": 3, "tokens": 100,
                                             "max_len": 512, "calibration_texts": 8, "calibration_sha256": "a" * 64},
        baseline=baseline,
        formats=(_row("fp8", 10.3), _row("int4_awq", 12.5, 0.7), _row("fp8+kv_fp8", 10.5, kv_measured=True),
                 _row("nvfp4", float("inf"), 0.0)),
        max_delta=max_delta, passed=True, failed=(), report_dir=tmp_path, reports={}, inputs_hash="h" * 64,
    )
    return apply_gate(result, max_delta)


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
    from pipeline.calibration import load_calibration

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


def test_variants_from_formats_apply_one_kv_cache_and_drop_duplicates():
    spec = EvaluateSpec.from_formats("m", ["fp8", "FP8", "int8_sq"], "fp8")
    assert [v.name for v in spec.variants] == ["fp8+kv_fp8", "int8_sq+kv_fp8"]
    assert [v.name for v in EvaluateSpec.from_formats("m", ["fp8"], "fp16").variants] == ["fp8"]
    with pytest.raises(InvalidInputError, match="Unknown quantization format"):
        Variant(quant="fp9")
    with pytest.raises(InvalidInputError, match="Unknown KV-cache format"):
        Variant(quant="fp8", kv_cache="int4")


def test_gate_marks_formats_over_the_allowed_rise(tmp_path: Path):
    result = _result(tmp_path, max_delta=0.1)
    assert [f.passed for f in result.formats] == [True, False, True, False]
    assert result.failed == ("int4_awq", "nvfp4") and not result.passed
    with pytest.raises(GateFailedError) as caught:
        check_gate(result)
    assert caught.value.exit_code == 4
    text = str(caught.value)
    assert "int4_awq" in text and "+25.00%" in text and "nvfp4" in text and "inf" in text and "fp8 " not in text
    relaxed = apply_gate(result, 10.0)
    assert relaxed.failed == ("nvfp4",)  # an infinite perplexity never passes
    strict = apply_gate(result, 0.0)
    assert set(strict.failed) == {"fp8", "int4_awq", "fp8+kv_fp8", "nvfp4"}
    check_gate(apply_gate(result.model_copy(update={"formats": result.formats[:1]}), 0.1))  # passes: no raise


def test_reports_json_csv_markdown_png(tmp_path: Path):
    result = _result(tmp_path)
    paths = write_reports(result, tmp_path)
    assert set(paths) == {"json", "csv", "markdown", "plot"}
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["plot"].stat().st_size > 10_000
    rows = list(csv.DictReader(paths["csv"].open(encoding="utf-8")))
    assert [r["name"] for r in rows] == ["baseline", "fp8", "int4_awq", "fp8+kv_fp8", "nvfp4"]
    assert rows[2]["passed"] == "False" and math.isclose(float(rows[2]["perplexity"]), 12.5)
    markdown = paths["markdown"].read_text(encoding="utf-8")
    assert markdown_table(result) in markdown and "FAILED: int4_awq, nvfp4" in markdown
    assert "| fp8+kv_fp8 | fp8 | 10.500 | +5.00% | 0.9000 | 0.4000 | yes | pass |" in markdown


def test_record_in_manifest_keeps_the_checkpoint_up_to_date(tmp_path: Path):
    import time

    from pipeline.artifacts import is_up_to_date

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}", encoding="utf-8")
    inputs_hash = sha256_json({"x": 1})
    calibration = {"sha256": "c" * 64, "size": 8}
    write_json_atomic(ckpt / "manifest.json", build_manifest(stage="convert", inputs={"x": 1}, inputs_hash=inputs_hash,
                                                             folder=ckpt, started=time.time(),
                                                             extra={"calibration": calibration}))
    result = _result(tmp_path)
    assert record_in_manifest(ckpt, result)["calibration_matches_checkpoint"] is False
    result = result.model_copy(update={"dataset": {**result.dataset, "calibration_sha256": "c" * 64}})
    record = record_in_manifest(ckpt, result)
    assert record["calibration_matches_checkpoint"] is True
    manifest = read_manifest(ckpt)
    assert manifest["evaluation"] == json.loads(json.dumps(record))
    assert manifest["evaluation"]["formats"]["int4_awq"]["passed"] is False
    assert manifest["evaluation"]["baseline"]["perplexity"] == 10.0
    assert is_up_to_date(ckpt, inputs_hash)
    with pytest.raises(InvalidInputError, match="no readable manifest.json"):
        record_in_manifest(tmp_path / "nowhere", _result(tmp_path))


def test_cli_refuses_bad_inputs_before_loading_anything(tmp_path: Path):
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8"]) == 2  # no config.json
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp9"]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--kv-cache", "int3"]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--max-delta", "-1"]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--data", str(tmp_path / "no.txt")]) == 2
    assert run(["evaluate", "--model", str(tmp_path), "--quant", "fp8", "--record-in", str(tmp_path / "ckpt")]) == 2

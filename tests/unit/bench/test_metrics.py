"""Statistics, Prometheus parsing and diffs, SLO parsing and gates, diagnosis hints."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.bench.diagnosis import diagnose
from pipeline.bench.gates import check_gates
from pipeline.bench.metrics import kv_cache_usage, merge_peaks, parse_prometheus, server_delta
from pipeline.bench.spec import BenchSpec, Dist, parse_slo
from pipeline.bench.stats import summarize
from pipeline.core.errors import InvalidInputError


def test_summarize_matches_numpy_and_skips_missing_values() -> None:
    values = list(range(1, 101))
    s = summarize(values + [None])
    assert s["count"] == 100 and s["min"] == 1 and s["max"] == 100 and s["mean"] == 50.5
    assert s["p50"] == pytest.approx(50.5) and s["p99"] == pytest.approx(np.percentile(values, 99))
    assert s["p90"] == pytest.approx(90.1) and s["std"] == pytest.approx(np.std(values))
    assert summarize([None])["p99"] is None and summarize([])["count"] == 0


BEFORE = """# HELP nv_inference_request_success Number of successful inference requests
nv_inference_request_success{model="ensemble",version="1"} 10
nv_inference_queue_duration_us{model="ensemble",version="1"} 1000
nv_inference_compute_infer_duration_us{model="ensemble",version="1"} 5000
nv_inference_request_success{model="tensorrt_llm",version="1"} 10
nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 2000
nv_inference_compute_input_duration_us{model="tensorrt_llm",version="1"} 100
nv_inference_compute_infer_duration_us{model="tensorrt_llm",version="1"} 1000
nv_inference_exec_count{model="tensorrt_llm",version="1"} 10
nv_inference_count{model="tensorrt_llm",version="1"} 10
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 100
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 0
"""
AFTER = BEFORE.replace(
    'nv_inference_request_success{model="tensorrt_llm",version="1"} 10', 'nv_inference_request_success{model="tensorrt_llm",version="1"} 30'
).replace(
    'nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 2000', 'nv_inference_queue_duration_us{model="tensorrt_llm",version="1"} 402000'
).replace(
    'nv_inference_compute_infer_duration_us{model="tensorrt_llm",version="1"} 1000', 'nv_inference_compute_infer_duration_us{model="tensorrt_llm",version="1"} 21000'
).replace('nv_inference_exec_count{model="tensorrt_llm",version="1"} 10', 'nv_inference_exec_count{model="tensorrt_llm",version="1"} 15'
).replace('nv_inference_count{model="tensorrt_llm",version="1"} 10', 'nv_inference_count{model="tensorrt_llm",version="1"} 30')


def test_prometheus_parse_and_per_model_queue_vs_compute() -> None:
    before, after = parse_prometheus(BEFORE), parse_prometheus(AFTER)
    assert before[("nv_inference_request_success", (("model", "ensemble"), ("version", "1")))] == 10
    peaks: dict = {}
    during = parse_prometheus(AFTER.replace('kv_cache_block_type="used",model="tensorrt_llm",version="1"} 0',
                                            'kv_cache_block_type="used",model="tensorrt_llm",version="1"} 95'))
    merge_peaks(peaks, during)
    merge_peaks(peaks, after)
    delta = server_delta(before, after, peaks)
    trt = delta["models"]["tensorrt_llm"]
    assert trt["requests"] == 20
    assert trt["queue_ms_per_request"] == pytest.approx(400000 / 1000 / 20)
    assert trt["compute_ms_per_request"] == pytest.approx(20000 / 1000 / 20)
    assert trt["avg_batch"] == pytest.approx(20 / 5)
    assert "ensemble" not in delta["models"]  # no request grew there
    assert kv_cache_usage(delta["trt_llm"]) == pytest.approx(0.95)
    assert server_delta(None, after) is None


def _level(load, c, tok_s, ttft_p50, errors=0):
    return {"load": load, "concurrency": c, "completed": 10, "requests": 10 + errors, "errors": errors,
            "error_rate": errors / (10 + errors), "error_messages": {"boom": errors} if errors else {},
            "output_tok_s": tok_s, "ttft_ms": {"p50": ttft_p50, "p99": ttft_p50 * 2}, "tpot_ms": {"p50": 5.0, "p99": 9.0}}


def test_diagnosis_hints_name_their_measurements() -> None:
    server = server_delta(parse_prometheus(BEFORE), parse_prometheus(AFTER),
                          parse_prometheus(AFTER.replace('"used",model="tensorrt_llm",version="1"} 0', '"used",model="tensorrt_llm",version="1"} 97')))
    levels = [_level("c=1", 1, 100.0, 50.0), _level("c=8", 8, 700.0, 60.0, errors=1)]
    hints = diagnose(levels, [None, server])
    text = "\n".join(f"{h.finding} | {h.measurement} | {h.action}" for h in hints)
    assert "nv_inference_queue_duration_us 20.0 ms/request" in text and "tensorrt_llm at c=8" in text
    assert "kv_cache_block_metrics used/max peaked at 97%" in text and "kv_cache_free_gpu_mem_fraction" in text
    assert "x7.0 from c=1 (100.0) to c=8 (700.0)" in text and "Batch more" in text
    assert "error_rate 9.1% at c=8" in text
    pd = {"isl_sweep": [{"isl": 100, "ttft_ms_p50": 10.0}, {"isl": 400, "ttft_ms_p50": 100.0}]}
    assert any("chunked context" in h.action and "ISL x4" in h.measurement for h in diagnose([], [], pd))
    # flat throughput with rising TTFT: saturation, not "batch more"
    sat = diagnose([_level("c=1", 1, 100.0, 10.0), _level("c=16", 16, 130.0, 200.0)], [None, None])
    assert [h.finding for h in sat] == ["more load mostly adds waiting: throughput flattened while TTFT grew"]


def test_slo_parsing_and_gates() -> None:
    assert parse_slo("ttft_p99_ms=500").key == "ttft_ms.p99"
    assert parse_slo("itl_p95_ms=20").key == "tpot_ms.p95"
    assert parse_slo("output_tok_s=100").direction == "min"
    for bad in ("ttft_p99=5", "nope=1", "error_rate", "ttft_p99_ms=fast"):
        with pytest.raises(InvalidInputError):
            parse_slo(bad)
    levels = [_level("c=1", 1, 100.0, 50.0), _level("c=8", 8, 700.0, 300.0, errors=1)]
    results = check_gates([parse_slo("ttft_p99_ms=500"), parse_slo("error_rate=0"), parse_slo("output_tok_s=50")], levels)
    failed = [(g.slo, g.level) for g in results if not g.passed]
    assert failed == [("ttft_p99_ms", "c=8"), ("error_rate", "c=8")]
    missing = check_gates([parse_slo("tpot_p50_ms=1")], [{**levels[0], "tpot_ms": {"p50": None}}])
    assert missing[0].passed is False  # no value (everything failed) never passes


def test_spec_parsing_and_defaults() -> None:
    assert Dist.parse("128:16", what="--isl") == Dist(mean=128, std=16)
    with pytest.raises(InvalidInputError):
        Dist.parse("0", what="--isl")
    spec = BenchSpec(url="h:1", concurrency=(1, 16))
    assert spec.level_requests(1) == 8 and spec.level_requests(16) == 64
    assert BenchSpec(url="h:1", duration_s=5).level_requests(4) is None
    with pytest.raises(InvalidInputError):
        BenchSpec(url="h:1", concurrency=(0,))


def test_server_timestamps_give_scheduler_wait_and_its_hint() -> None:
    from pipeline.bench.metrics import request_metrics
    from pipeline.bench.runner import RequestRecord

    record = RequestRecord(index=0, isl=8, max_tokens=4, min_tokens=4, send_t=10.0, first_t=10.5, last_t=11.0,
                           chunk_t=[10.5, 11.0], send_unix_ns=1_000_000_000_000,
                           perf={"arrival_time_ns": 1_000_010_000_000, "first_scheduled_time_ns": 1_000_310_000_000,
                                 "first_token_time_ns": 1_000_490_000_000})
    m = request_metrics(record, 4)
    assert m.server_queue_ms == pytest.approx(300.0) and m.server_ttft_ms == pytest.approx(480.0)
    assert m.client_minus_server_first_token_ms == pytest.approx(10.0)
    level = {**_level("c=8", 8, 10.0, 500.0), "server_queue_ms": {"p50": 300.0}, "server_ttft_ms": {"p50": 480.0}}
    (hint,) = [h for h in diagnose([level], [None]) if "batch slot" in h.finding]
    assert "first_scheduled - arrival p50 300.0 ms" in hint.measurement


def test_serialized_bytes_tensor_is_joined_like_tritonclient_reads_it() -> None:
    from tritonclient.utils import serialize_byte_tensor

    from pipeline.bench.transport import _bytes_tensor_join

    pieces = np.array([" caf".encode(), "\u00e9 ".encode()[:1], "\u00e9 ".encode()[1:], b""], dtype=np.object_)
    raw = serialize_byte_tensor(pieces).item()
    assert _bytes_tensor_join(raw) == " caf\u00e9 ".encode()
    assert _bytes_tensor_join(b"") == b""

"""Prompts with exact token counts, JSONL datasets, and report files from a fake-transport run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench_fakes import word_tokenizer
from pipeline.bench.spec import BenchSpec, Dist, parse_slo
from pipeline.bench.transport import ModelInfo
from pipeline.bench.workload import count_tokens, cycle, dataset_requests, synthetic_requests
from pipeline.core.errors import InvalidInputError


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


def test_synthetic_prompts_have_exact_token_lengths(tokenizer) -> None:
    reqs = synthetic_requests(tokenizer, Dist(mean=50, std=10), Dist(mean=20, std=5), 40, seed=3)
    assert [r.isl for r in reqs] == count_tokens(tokenizer, [r.prompt for r in reqs])
    assert len({r.isl for r in reqs}) > 5  # the std is honoured
    assert all(r.min_tokens == r.max_tokens >= 1 for r in reqs)
    assert len({r.prompt for r in reqs}) == 40  # distinct: no accidental prefix reuse
    again = synthetic_requests(tokenizer, Dist(mean=50, std=10), Dist(mean=20, std=5), 40, seed=3)
    assert [r.prompt for r in again] == [r.prompt for r in reqs]


@pytest.mark.slow
def test_exact_lengths_with_the_demo_model_tokenizer(demo_hf_dir: Path) -> None:
    from pipeline.bench.workload import load_tokenizer

    tok = load_tokenizer(demo_hf_dir)
    reqs = synthetic_requests(tok, Dist(mean=128, std=32), Dist(mean=16), 30)
    assert [r.isl for r in reqs] == count_tokens(tok, [r.prompt for r in reqs])
    assert all(abs(r.isl - 128) <= 4 * 32 for r in reqs)


def test_dataset_jsonl(tmp_path: Path, tokenizer) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"text_input": "aaaa aaab aaac", "max_tokens": 7}\n\n{"prompt": "aaad"}\n')
    reqs = dataset_requests(data, tokenizer, Dist(mean=9))
    assert [(r.isl, r.max_tokens, r.min_tokens) for r in reqs] == [(3, 7, None), (1, 9, None)]
    assert [r.index for r in cycle(reqs, 5)] == [0, 1, 2, 3, 4]
    data.write_text('{"nothing": 1}\n')
    with pytest.raises(InvalidInputError, match="no prompt"):
        dataset_requests(data, tokenizer, Dist(mean=9))
    with pytest.raises(InvalidInputError, match="does not exist"):
        dataset_requests(tmp_path / "missing.jsonl", tokenizer, Dist(mean=9))


def test_run_bench_writes_every_request_and_the_plots(tmp_path: Path, tokenizer, monkeypatch) -> None:
    """run_bench end to end on a fake transport (real asyncio time): files, rows, gates, atomic folder."""
    import asyncio

    from pipeline.bench import run_bench

    class Quick:
        async def stream(self, request):
            from pipeline.bench.transport import Chunk

            await asyncio.sleep(0.002)
            if request.index == 3:
                yield None, "bad request"
                return
            for _ in range(request.max_tokens):
                yield Chunk(text=" aaaa"), None

        def decode(self, payload):
            return payload

    spec = BenchSpec(url="fake:1", model="echo", concurrency=(1, 2), requests=6, isl=Dist(mean=16), osl=Dist(mean=4),
                     slo=(parse_slo("error_rate=0"), parse_slo("ttft_p99_ms=10000")), out=tmp_path / "reports", warmup=1)
    info = ModelInfo(name="echo", inputs=frozenset({"text_input", "max_tokens"}), batched=True)
    result = run_bench(spec, transport=Quick(), info=info, tokenizer=tokenizer)
    folder = result.out_dir
    assert folder.parent == tmp_path / "reports" and folder.is_dir()
    names = {p.name for p in folder.iterdir()}
    assert {"bench.json", "requests.csv", "summary.md", "manifest.json", "ttft_tpot_vs_concurrency.png",
            "throughput_vs_latency.png", "ttft_vs_isl.png"} <= names
    data = json.loads((folder / "bench.json").read_text())
    assert [len(lv["per_request"]) for lv in data["levels"]] == [6, 6]
    rows = list(csv.DictReader(open(folder / "requests.csv")))
    assert len(rows) == 12 and sum(r["ok"] == "False" for r in rows) == 2
    assert all(r["osl"] == "4" for r in rows if r["ok"] == "True")
    assert [(g.slo, g.level) for g in result.failed_gates] == [("error_rate", "c=1"), ("error_rate", "c=2")]
    md = (folder / "summary.md").read_text()
    assert "| c=2 | 5/6 |" in md and "FAIL" in md and "bad request" in md and "## Diagnosis" in md
    assert (folder / "ttft_vs_isl.png").read_bytes()[:4] == b"\x89PNG"

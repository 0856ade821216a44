"""Files of a bench run: bench.json (every request's timings), requests.csv, summary.md. Plots are
in plots.py. The Markdown summary ends with the diagnosis."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from pipeline.bench.lora_mix import ROW_COLUMNS, class_rows
from pipeline.core.artifacts import write_json_atomic, write_text_atomic
from pipeline.core.output import to_jsonable

CSV_FIELDS = ("level", "index", "ok", "error", "isl", "osl", "osl_target", "responses", "ttft_ms", "tpot_ms",
              "latency_ms", "output_tok_s", "server_ttft_ms", "server_queue_ms", "client_minus_server_first_token_ms",
              "send_unix_ns", "accepted_draft_tokens", "draft_tokens")


def _f(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def level_rows(levels: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The headline numbers of each level, for the terminal table and the Markdown summary."""
    rows = []
    for lv in levels:
        rows.append([
            lv["load"], f"{lv['completed']}/{lv['requests']}", _f(lv["error_rate"] * 100, 1),
            _f(lv["ttft_ms"]["p50"]), _f(lv["ttft_ms"]["p99"]), _f(lv["tpot_ms"]["p50"], 2), _f(lv["tpot_ms"]["p99"], 2),
            _f(lv["latency_ms"]["p50"]), _f(lv["latency_ms"]["p99"]), _f(lv["output_tok_s"]), _f(lv["requests_s"], 2),
            _f(lv["isl"]["mean"], 0), _f(lv["osl"]["mean"], 0),
        ])
    return rows


def terminal_rows(levels: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The same numbers folded into p50/p99 pairs, to fit a terminal."""
    def pair(stats: dict[str, Any], digits: int = 1) -> str:
        return f"{_f(stats['p50'], digits)} / {_f(stats['p99'], digits)}"

    return [[lv["load"], f"{lv['completed']}/{lv['requests']}", _f(lv["error_rate"] * 100, 1), pair(lv["ttft_ms"]),
             pair(lv["tpot_ms"], 2), pair(lv["latency_ms"]), _f(lv["output_tok_s"]), _f(lv["requests_s"], 2),
             f"{_f(lv['isl']['mean'], 0)} / {_f(lv['osl']['mean'], 0)}"] for lv in levels]


TERMINAL_COLUMNS = ["load", "ok", "err %", "TTFT ms p50/p99", "TPOT ms p50/p99", "latency ms p50/p99", "out tok/s",
                    "req/s", "ISL/OSL"]

LEVEL_COLUMNS = ["load", "ok", "err %", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms",
                 "latency p50 ms", "latency p99 ms", "out tok/s", "req/s", "ISL", "OSL"]


def _md_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: Path, levels: Sequence[dict[str, Any]], requests: Sequence[Sequence[Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for level, metrics in zip(levels, requests):
        for m in metrics:
            writer.writerow({"level": level["load"], **asdict(m)})
    write_text_atomic(path, buffer.getvalue())


def markdown(result: Any) -> str:
    """The human summary: what ran, the per-level table, server-side split, gates, prediction, diagnosis."""
    spec = result.spec
    out = [f"# Benchmark: {result.served_model} at {spec.url}", ""]
    workload = f"dataset {spec.dataset}" if spec.dataset else f"synthetic ISL {spec.isl} / OSL {spec.osl} (forced with min_tokens)"
    out += [f"- workload: {workload}; tokenizer {result.tokenizer_dir}",
            f"- warm-up: {spec.warmup} request(s), excluded; streaming over gRPC (tritonclient.grpc.aio)",
            "- definitions (genai-perf): TTFT = first response - send; TPOT = (latency - TTFT)/(OSL - 1); "
            "OSL counted with the model's tokenizer", *[f"- note: {n}" for n in result.notes], ""]
    if result.levels:
        out += ["## Client-side measurements", "", _md_table(LEVEL_COLUMNS, level_rows(result.levels)), ""]
    adapter_rows = class_rows(result.levels)
    if adapter_rows:
        out += ["## LoRA adapters against base requests (--lora-mix)", "", _md_table(ROW_COLUMNS, adapter_rows), ""]
    server_rows = []
    for level, server in zip(result.levels, result.servers):
        for name, s in (server or {}).get("models", {}).items():
            server_rows.append([level["load"], name, _f(s["requests"], 0), _f(s["queue_ms_per_request"], 2),
                                _f(s["compute_ms_per_request"], 2), _f(s["request_ms_per_request"], 2), _f(s["avg_batch"], 2)])
    if server_rows:
        out += ["## Server-side (Prometheus, growth over each level)", "",
                _md_table(["load", "model", "requests", "queue ms/req", "compute ms/req", "request ms/req", "avg batch"],
                          server_rows), ""]
    perf_rows = [[lv["load"], _f(lv["server_queue_ms"]["p50"]), _f(lv["server_ttft_ms"]["p50"]), _f(lv["ttft_ms"]["p50"]),
                  _f(lv["client_minus_server_first_token_ms"]["p50"], 2)] for lv in result.levels if lv["server_ttft_ms"]["count"]]
    if perf_rows:
        out += ["## Server timestamps (return_perf_metrics)", "",
                _md_table(["load", "scheduler wait p50 ms", "server TTFT p50 ms", "client TTFT p50 ms",
                           "client first response - server first token p50 ms"], perf_rows), ""]
    if result.prefill_decode:
        pd = result.prefill_decode
        out += ["## Prefill vs decode", "",
                _md_table(["ISL (OSL fixed)", "TTFT p50 ms", "TPOT p50 ms"],
                          [[p["isl"], _f(p["ttft_ms_p50"]), _f(p["tpot_ms_p50"], 2)] for p in pd["isl_sweep"]]), "",
                _md_table(["OSL (ISL fixed)", "TTFT p50 ms", "TPOT p50 ms"],
                          [[p["osl"], _f(p["ttft_ms_p50"]), _f(p["tpot_ms_p50"], 2)] for p in pd["osl_sweep"]]), "",
                f"- TTFT growth with ISL: {_f(pd.get('ttft_ms_per_1k_isl'), 2)} ms per 1k prompt tokens",
                f"- TPOT growth with context: {_f(pd.get('tpot_ms_per_1k_context'), 3)} ms per 1k context tokens", ""]
    if result.prediction:
        out += ["## Planner prediction beside the measurement", "",
                _md_table(["load", "TTFT ms meas / pred", "TPOT ms meas / pred", "out tok/s meas / pred"],
                          [[p["load"], f"{_f(p['ttft_ms'])} / {_f(p['pred_ttft_ms'])}",
                            f"{_f(p['tpot_ms'], 2)} / {_f(p['pred_tpot_ms'], 2)}",
                            f"{_f(p['output_tok_s'])} / {_f(p['pred_output_tok_s'])}"] for p in result.prediction]), ""]
    if result.gates:
        out += ["## SLO gates", "", _md_table(["SLO", "level", "value", "bound", "result"],
                                             [[g.slo, g.level, _f(g.value, 3), ("<= " if g.direction == "max" else ">= ") + f"{g.bound:g}",
                                               "pass" if g.passed else "FAIL"] for g in result.gates]), ""]
    errors = {msg: n for lv in result.levels for msg, n in lv["error_messages"].items()}
    if errors:
        out += ["## Errors", "", _md_table(["count", "error"], [[n, msg] for msg, n in errors.items()]), ""]
    out += ["## Diagnosis", ""]
    if result.hints:
        out += [f"- **{h.finding}** ({h.measurement}): {h.action}" for h in result.hints]
    else:
        out += ["- Nothing stands out in these measurements."]
    return "\n".join(out) + "\n"


def write_reports(result: Any, folder: Path) -> dict[str, Path]:
    """bench.json, requests.csv, summary.md into folder (which the caller makes atomic)."""
    files = {"json": folder / "bench.json", "csv": folder / "requests.csv", "markdown": folder / "summary.md"}
    write_json_atomic(files["json"], to_jsonable(result.as_dict()))
    write_csv(files["csv"], result.levels, result.requests)
    write_text_atomic(files["markdown"], markdown(result))
    return files

"""`pipeline bench --speculative --baseline URL`: the same workload against a deployment built with speculation and
one of the same model built without it, level by level, and what speculation buys at each concurrency.

Why two deployments: speculation is a build and server setting on every path (the n-gram, EAGLE-3 and lookahead
decoders, the reference runtime's draft-target), so the workload without it needs a server without it. Both runs
use the same prompts (same seed or --dataset), levels and warm-up; the baseline runs first, then the speculative one.

Per concurrency:
- acceptance rate = sum(total_accepted_draft_tokens) / sum(total_draft_tokens) over the level's requests, the
  server's per-request outputs with return_perf_metrics (fact 1.20; pipeline.clients.triton.SPECULATION_OUTPUTS);
- accepted tokens per step: each verification step after the first token emits its accepted drafts plus the target's
  own token, so a request of OSL tokens took (OSL - 1 - accepted) steps; tokens per step = 1 + accepted per step;
- TTFT/TPOT p50 and output tokens/s of both runs, and speedup = output tokens/s with / without;
- break-even concurrency: the lowest measured concurrency whose speedup is <= 1 (speculation stops paying there).
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pipeline.bench import metrics as M
from pipeline.bench.session import BenchEvents, BenchResult, run_bench, report_dir, served_model_info
from pipeline.bench.spec import BenchSpec
from pipeline.bench.transport import ModelInfo, Transport
from pipeline.build.speculative import recorded_speculation
from pipeline.core.errors import InvalidInputError

CSV_FIELDS = ("concurrency", "acceptance_rate", "accepted_per_step", "tokens_per_step", "ttft_ms_base", "ttft_ms_spec",
              "tpot_ms_base", "tpot_ms_spec", "output_tok_s_base", "output_tok_s_spec", "speedup", "tpot_speedup")


@dataclass(frozen=True)
class ServedSpeculation:
    """What the deployment says about speculation: `record` is its build's "speculative" record (None: built without
    it); known is False when nothing readable says either way (a remote repository, an OpenAI server)."""

    record: dict[str, Any] | None
    known: bool
    source: str


@dataclass(frozen=True)
class Side:
    """One deployment to measure: its transport and model info (given by tests; found from the URL otherwise)."""

    transport: Transport | None = None
    info: ModelInfo | None = None


@dataclass
class SpeculativeResult:
    spec: BenchSpec
    speculation: ServedSpeculation
    with_spec: BenchResult
    baseline: BenchResult
    levels: list[dict[str, Any]] = field(default_factory=list)
    break_even: int | None = None
    notes: list[str] = field(default_factory=list)
    out_dir: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.spec.url, "baseline": self.spec.baseline, "speculation": self.speculation.record,
                "speculation_source": self.speculation.source, "levels": self.levels, "break_even_concurrency": self.break_even,
                "notes": self.notes, "files": self.files}


def served_speculation(url: str, contract: str) -> ServedSpeculation:
    """Read the repository behind a Triton server: the tensorrt_llm model's gpt_model_path (the engine or reference
    folder, with its manifest.json and config.json), else the BLS's tensorrt_llm_draft_model_name parameter."""
    if contract != "triton-ensemble":
        return ServedSpeculation(None, False, f"a {contract} server (its options are not readable over the API)")
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def parameters(client, model: str) -> dict[str, str]:
        try:
            config = client.get_model_config(model).config
        except InferenceServerException:
            return {}
        return {key: value.string_value for key, value in config.parameters.items()}

    client = grpcclient.InferenceServerClient(url)
    try:
        engine = parameters(client, "tensorrt_llm").get("gpt_model_path", "")
        draft_model = parameters(client, "tensorrt_llm_bls").get("tensorrt_llm_draft_model_name", "")
    finally:
        client.close()
    if engine and Path(engine).is_dir():
        found = recorded_speculation(Path(engine))
        if found is not False:
            return ServedSpeculation(found, True, f"{engine}/manifest.json")
    if draft_model and "${" not in draft_model:
        return ServedSpeculation({"method": "draft-target", "draft_model": draft_model}, True,
                                 "tensorrt_llm_bls parameter tensorrt_llm_draft_model_name")
    return ServedSpeculation(None, False, f"gpt_model_path {engine or '(none)'} is not readable here")


def require_speculation(found: ServedSpeculation, url: str) -> None:
    """--speculative against a deployment that was built without it: exit 2 with what would work."""
    if found.known and found.record is None:
        raise InvalidInputError(
            f"The deployment at {url} was built without speculation ({found.source} records none), so --speculative "
            "has nothing to compare.",
            hint="Build the model with `pipeline build --speculative ngram` (or draft-target --draft SOURCE), render "
                 "and serve it, then `pipeline bench --speculative --url THAT --baseline THIS`; or drop --speculative.")


def level_speculation(requests: Sequence[M.RequestMetrics]) -> dict[str, float | None]:
    """Acceptance rate and accepted tokens per step of one level's requests (None when the server sent no counts)."""
    counted = [m for m in requests if m.ok and m.draft_tokens is not None and m.accepted_draft_tokens is not None]
    drafted = sum(m.draft_tokens or 0 for m in counted)
    accepted = sum(m.accepted_draft_tokens or 0 for m in counted)
    steps = sum(max(0, (m.osl or 0) - 1 - (m.accepted_draft_tokens or 0)) for m in counted)
    per_step = accepted / steps if steps else None
    return {"acceptance_rate": accepted / drafted if drafted else None, "accepted_per_step": per_step,
            "tokens_per_step": None if per_step is None else 1 + per_step,
            "accepted_draft_tokens": accepted if counted else None, "draft_tokens": drafted if counted else None}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def compare(with_spec: BenchResult, baseline: BenchResult) -> list[dict[str, Any]]:
    """One row per concurrency measured on both sides."""
    base = {lv["concurrency"]: lv for lv in baseline.levels if lv.get("concurrency")}
    rows = []
    for lv, requests in zip(with_spec.levels, with_spec.requests):
        other = base.get(lv.get("concurrency"))
        if other is None:
            continue
        rows.append({
            "concurrency": lv["concurrency"], **level_speculation(requests),
            "ttft_ms_base": other["ttft_ms"]["p50"], "ttft_ms_spec": lv["ttft_ms"]["p50"],
            "tpot_ms_base": other["tpot_ms"]["p50"], "tpot_ms_spec": lv["tpot_ms"]["p50"],
            "output_tok_s_base": other["output_tok_s"], "output_tok_s_spec": lv["output_tok_s"],
            "speedup": _ratio(lv["output_tok_s"], other["output_tok_s"]),
            "tpot_speedup": _ratio(other["tpot_ms"]["p50"], lv["tpot_ms"]["p50"]),
            "errors": lv["errors"] + other["errors"],
        })
    return rows


def break_even(rows: Sequence[dict[str, Any]]) -> int | None:
    """The lowest measured concurrency at which speculation no longer pays (speedup <= 1); None if it pays at all."""
    return next((r["concurrency"] for r in sorted(rows, key=lambda r: r["concurrency"])
                 if r["speedup"] is not None and r["speedup"] <= 1.0), None)


def check_spec(spec: BenchSpec) -> None:
    if not spec.baseline:
        raise InvalidInputError(
            "--speculative compares against a deployment of the same model built without speculation: none given.",
            hint="Serve the model built without --speculative (e.g. on port 8011) and pass --baseline 127.0.0.1:8011.")
    if spec.rate or spec.prefill_decode:
        raise InvalidInputError("--speculative measures a concurrency sweep; --rate and --prefill-decode do not apply.",
                                hint="Drop --rate/--prefill-decode and give --concurrency 1,2,4,8.")


def run_speculative_bench(spec: BenchSpec, *, speculative: Side = Side(), baseline: Side = Side(), tokenizer: Any = None,
                          events: BenchEvents = BenchEvents(), write: bool = True) -> SpeculativeResult:
    """Bench the baseline, then the speculative deployment (perf metrics on), and compare them per concurrency."""
    check_spec(spec)
    with_spec = spec.model_copy(update={"perf_metrics": True})
    # --metrics-url names the speculative server's endpoint: the baseline's is found from its own URL
    without = spec.model_copy(update={"url": spec.baseline, "model": spec.baseline_model or spec.model, "metrics_url": None})
    info = speculative.info or served_model_info(with_spec)
    found = (ServedSpeculation(None, False, "given by the caller") if speculative.transport is not None
             else served_speculation(spec.url, info.contract))
    require_speculation(found, spec.url)
    base_info = baseline.info or served_model_info(without)
    base_found = (ServedSpeculation(None, False, "given by the caller") if baseline.transport is not None
                  else served_speculation(without.url, base_info.contract))
    base = run_bench(without, transport=baseline.transport, info=base_info, tokenizer=tokenizer, events=events, write=False)
    spec_run = run_bench(with_spec, transport=speculative.transport, info=info, tokenizer=tokenizer, events=events, write=False)
    result = SpeculativeResult(spec=spec, speculation=found, with_spec=spec_run, baseline=base)
    result.levels = compare(spec_run, base)
    result.break_even = break_even(result.levels)
    if base_found.record is not None:
        result.notes.append(f"The baseline {spec.baseline} was built with speculation too ({base_found.record}): the "
                            "speedup compares two speculative deployments.")
    if not found.known:
        result.notes.append(f"Whether {spec.url} was built with speculation could not be read ({found.source}).")
    if result.levels and all(r["acceptance_rate"] is None for r in result.levels):
        result.notes.append(f"{spec.url} returned no acceptance counts (acceptance_rate, total_accepted_draft_tokens, "
                            "total_draft_tokens with return_perf_metrics): acceptance is not measured.")
    result.notes += [f"baseline: {n}" for n in base.notes] + [f"speculative: {n}" for n in spec_run.notes]
    if write:
        write_speculative(result, report_dir(spec, spec_run.tokenizer_dir, spec_run.served_model))
    return result


def speculative_csv(rows: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in CSV_FIELDS})
    return buffer.getvalue()


def write_speculative(result: SpeculativeResult, reports: Path) -> Path:
    """reports/bench-speculative-<time>/: speculative.json, speculative.csv, speedup_vs_concurrency.png, and both
    runs' own reports under speculative/ and baseline/."""
    from pipeline.bench.plots import plot_all, plot_speedup
    from pipeline.bench.report import write_reports
    from pipeline.bench.session import write_bench_manifest
    from pipeline.core.artifacts import atomic_dir, write_json_atomic, write_text_atomic
    from pipeline.core.output import to_jsonable

    started = time.time()
    destination = reports / time.strftime("bench-speculative-%Y%m%d-%H%M%S")
    with atomic_dir(destination) as tmp:
        for name, run in (("speculative", result.with_spec), ("baseline", result.baseline)):
            (tmp / name).mkdir()
            write_reports(run, tmp / name)
            plot_all(run, tmp / name)
        files = {"json": tmp / "speculative.json", "csv": tmp / "speculative.csv"}
        write_text_atomic(files["csv"], speculative_csv(result.levels))
        if any(r["speedup"] is not None for r in result.levels):
            files["speedup_vs_concurrency"] = plot_speedup(result.levels, result.break_even, tmp / "speedup_vs_concurrency.png")
        result.files = {k: destination / v.name for k, v in files.items()}
        write_json_atomic(files["json"], to_jsonable(result.as_dict()))
        write_bench_manifest(result.spec, tmp, started)
    result.out_dir = destination
    return destination

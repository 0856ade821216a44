"""Does the reference runtime's continuous batching pay? `make bench-runtime` (scripts/bench_runtime.py).

Three measurements of output tokens/s on the same prompts (ISL tokens in, OSL tokens forced out, greedy):

- served, concurrency 1 and concurrency `batch`: `pipeline bench` (pipeline.bench.session.run_bench) against
  the Triton ensemble of a reference-runtime repository (preprocessing -> tensorrt_llm -> postprocessing),
  every request streamed;
- static: transformers' own `generate` on a batch of `batch` prompts at once (prefill together, decode
  together), in this process with the runtime's torch thread count, the ceiling batching can reach.

On a shared machine the load changes from minute to minute, so the measurements alternate in rounds and
every ratio is taken within one round; the reported ratio is the median over rounds. Targets (issue 14):
served concurrency 8 >= 3.5x served concurrency 1, and >= 0.85x static batch 8.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

TARGET_SCALING = 3.5  # served c=batch over served c=1
TARGET_VS_STATIC = 0.85  # served c=batch over static generate at batch


@dataclass(frozen=True)
class RuntimeBenchSpec:
    url: str
    model_dir: Path  # the HF checkpoint the runtime serves (engine/model)
    tokenizer_dir: Path
    threads: int  # torch threads: the same the runtime uses (pipeline.core.cpus.reference_threads)
    isl: int = 64
    osl: int = 32
    batch: int = 8
    rounds: int = 3
    requests_per_slot: int = 4  # served requests per level: requests_per_slot x concurrency (at least 8)
    seed: int = 0


@dataclass
class Round:
    served_c1_tok_s: float
    served_cb_tok_s: float
    static_1_tok_s: float
    static_b_tok_s: float

    @property
    def scaling(self) -> float:
        return self.served_cb_tok_s / self.served_c1_tok_s

    @property
    def vs_static(self) -> float:
        return self.served_cb_tok_s / self.static_b_tok_s

    @property
    def static_scaling(self) -> float:
        return self.static_b_tok_s / self.static_1_tok_s


@dataclass
class RuntimeBenchResult:
    spec: RuntimeBenchSpec
    rounds: list[Round] = field(default_factory=list)
    errors: int = 0

    @property
    def scaling(self) -> float:
        return statistics.median(r.scaling for r in self.rounds)

    @property
    def vs_static(self) -> float:
        return statistics.median(r.vs_static for r in self.rounds)

    @property
    def static_scaling(self) -> float:
        return statistics.median(r.static_scaling for r in self.rounds)

    def targets(self) -> list[tuple[str, float, float, bool]]:
        """(name, measured, target, met) for each target."""
        b = self.spec.batch
        return [
            (f"served c={b} / served c=1", self.scaling, TARGET_SCALING, self.scaling >= TARGET_SCALING),
            (f"served c={b} / static generate batch {b}", self.vs_static, TARGET_VS_STATIC,
             self.vs_static >= TARGET_VS_STATIC),
            ("errors", float(self.errors), 0.0, self.errors == 0),
        ]

    @property
    def passed(self) -> bool:
        return all(met for *_, met in self.targets())

    def as_dict(self) -> dict[str, Any]:
        spec = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.spec).items()}
        return {
            "spec": spec,
            "rounds": [{**asdict(r), "scaling": r.scaling, "vs_static": r.vs_static, "static_scaling": r.static_scaling}
                       for r in self.rounds],
            "median": {"scaling": self.scaling, "vs_static": self.vs_static, "static_scaling": self.static_scaling},
            "targets": [{"name": n, "measured": m, "target": t, "met": ok} for n, m, t, ok in self.targets()],
            "errors": self.errors,
            "passed": self.passed,
        }


class StaticGenerate:
    """transformers' `generate` on whole batches, the runtime's model and thread count, greedy, exactly OSL tokens."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.threads = threads
        torch.set_num_threads(threads)
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, trust_remote_code=False)
        self.model.eval()

    def tok_s(self, prompts: list[list[int]], osl: int) -> float:
        torch = self.torch
        torch.set_num_threads(self.threads)
        ids = torch.tensor(prompts, dtype=torch.long)  # equal lengths: no padding
        started = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=osl, min_new_tokens=osl,
                                      do_sample=False, pad_token_id=self.model.generation_config.eos_token_id)
        elapsed = time.perf_counter() - started
        generated = (out.shape[1] - ids.shape[1]) * ids.shape[0]
        return generated / elapsed


def served_level(spec: RuntimeBenchSpec, concurrency: int, tokenizer: Any, url: str | None = None) -> dict[str, Any]:
    """One `pipeline bench` level (requests_per_slot x concurrency requests, at least 8) against the ensemble."""
    from pipeline.bench.session import run_bench
    from pipeline.bench.spec import BenchSpec, Dist

    bench = BenchSpec(url=url or spec.url, concurrency=(concurrency,), isl=Dist(mean=spec.isl), osl=Dist(mean=spec.osl),
                      requests=max(8, spec.requests_per_slot * concurrency), warmup=min(2, concurrency),
                      seed=spec.seed, tokenizer=spec.tokenizer_dir)
    return run_bench(bench, tokenizer=tokenizer, write=False).levels[0]


def run_runtime_bench(spec: RuntimeBenchSpec, *, log: Callable[[str], None] = print) -> RuntimeBenchResult:
    """Alternate served levels (c=1, c=`batch`) and static generate (batch 1, batch `batch`) for spec.rounds rounds."""
    from pipeline.bench.spec import Dist
    from pipeline.bench.workload import load_tokenizer, synthetic_requests

    tokenizer = load_tokenizer(spec.tokenizer_dir)
    pool = synthetic_requests(tokenizer, Dist(mean=spec.isl), Dist(mean=spec.osl), spec.batch, seed=spec.seed)
    prompts = [tokenizer(r.prompt, add_special_tokens=False)["input_ids"][: spec.isl] for r in pool]
    if any(len(p) != spec.isl for p in prompts):
        raise ValueError(f"synthetic prompts are not {spec.isl} tokens long: {[len(p) for p in prompts]}")
    static = StaticGenerate(spec.model_dir, spec.threads)
    static.tok_s(prompts[:1], 4)  # first-call costs out of the measurement
    result = RuntimeBenchResult(spec)

    def served(concurrency: int) -> float:
        level = served_level(spec, concurrency, tokenizer)
        result.errors += int(level["errors"])
        return float(level["output_tok_s"])

    for number in range(1, spec.rounds + 1):
        row = Round(served_c1_tok_s=served(1), served_cb_tok_s=served(spec.batch),
                    static_1_tok_s=static.tok_s(prompts[:1], spec.osl), static_b_tok_s=static.tok_s(prompts, spec.osl))
        result.rounds.append(row)
        log(f"round {number}: served c=1 {row.served_c1_tok_s:.1f}, c={spec.batch} {row.served_cb_tok_s:.1f} tok/s; "
            f"static batch 1 {row.static_1_tok_s:.1f}, batch {spec.batch} {row.static_b_tok_s:.1f} tok/s; "
            f"c={spec.batch}/c=1 {row.scaling:.2f}x, c={spec.batch}/static {row.vs_static:.2f}x")
    return result


@dataclass
class BatchLimitRun:
    """Concurrency `concurrency` against two engines that differ only in max_batch_size (alternating runs)."""

    concurrency: int
    small_batch: int
    large_batch: int
    runs: list[dict[str, float]] = field(default_factory=list)  # {"batch", "output_tok_s", "ttft_p50_ms", ...}

    def median(self, batch: int, key: str) -> float:
        return statistics.median(r[key] for r in self.runs if r["batch"] == batch)

    def as_dict(self) -> dict[str, Any]:
        keys = ("output_tok_s", "ttft_p50_ms", "ttft_p90_ms", "latency_p50_ms")
        return {"concurrency": self.concurrency, "runs": self.runs,
                "median": {str(b): {k: self.median(b, k) for k in keys} for b in (self.small_batch, self.large_batch)}}


def compare_batch_limits(spec: RuntimeBenchSpec, small_url: str, small_batch: int, *, rounds: int = 2,
                         log: Callable[[str], None] = print) -> BatchLimitRun:
    """What a smaller max_batch_size costs at concurrency spec.batch: alternating levels on both servers."""
    from pipeline.bench.workload import load_tokenizer

    tokenizer = load_tokenizer(spec.tokenizer_dir)
    run = BatchLimitRun(concurrency=spec.batch, small_batch=small_batch, large_batch=spec.batch)
    for _ in range(rounds):
        for batch, url in ((spec.batch, spec.url), (small_batch, small_url)):
            level = served_level(spec, spec.batch, tokenizer, url)
            row = {"batch": batch, "output_tok_s": float(level["output_tok_s"]),
                   "ttft_p50_ms": float(level["ttft_ms"]["p50"]), "ttft_p90_ms": float(level["ttft_ms"]["p90"]),
                   "latency_p50_ms": float(level["latency_ms"]["p50"]), "errors": float(level["errors"])}
            run.runs.append(row)
            log(f"max_batch_size {batch}, c={spec.batch}: {row['output_tok_s']:.1f} tok/s, TTFT p50 "
                f"{row['ttft_p50_ms'] / 1000:.2f} s, p90 {row['ttft_p90_ms'] / 1000:.2f} s")
    return run

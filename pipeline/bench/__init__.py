"""`pipeline bench`: latency and throughput of a served model, streamed: tritonclient's asyncio gRPC (Triton's
ensemble/BLS or LLM-API model) or an OpenAI-compatible server's SSE (the contract is detected, pipeline.clients.contract).

One room per concern:
  spec.py       BenchSpec (the frozen options), distributions, SLO parsing
  workload.py   prompts with exact token lengths, or a JSONL dataset; the tokenizer
  transport.py  one streamed request over tritonclient.grpc.aio (and the Transport protocol fakes follow);
                LlmApiTransport for the LLM-API model (cumulative text_output)
  openai_transport.py  one streamed chat/text completion over aiohttp; usage counts kept untimed
  runner.py     load generation: concurrency sweep or request rate, bounded by count/duration, warm-up
  metrics.py    per-request TTFT/TPOT/latency, per-level throughput, Prometheus scrape and diff
  stats.py      mean/min/max/std/percentiles
  diagnosis.py  operator hints, each naming the measurement it comes from
  gates.py      SLO gates
  report.py     JSON, CSV and Markdown; plots.py the PNGs
  session.py    run_bench(spec): all of the above in order
  datasets.py   --dataset NAME|FILE: built-in prompt sets (pipeline/data/bench) and OpenAI-style chat logs
  speculative.py  --speculative --baseline URL: the same workload with and without speculation, compared
  (tests/bench_fakes.py: a fake transport on virtual time and tiny tokenizers, for deterministic tests)
"""

from pipeline.bench.spec import BenchSpec, Dist, Slo, parse_slo
from pipeline.bench.session import BenchEvents, BenchResult, run_bench

__all__ = ["BenchSpec", "Dist", "Slo", "parse_slo", "BenchEvents", "BenchResult", "run_bench"]

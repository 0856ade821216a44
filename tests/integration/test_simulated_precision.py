"""The reference runtime serves the precision an engine was built for (ModelOpt fake quantization).

An fp8 (+ fp8 KV cache) engine and the fp16 demo engine answer the same prompts, token ids in, greedy,
with return_log_probs. What is fp8-specific:
- the fp8 server's tokens and log-probs are those of transformers' own `generate` on the simulated fp8
  model that `pipeline.quantization.simulated` builds (the numerics `pipeline evaluate` scores for fp8), to 1e-3;
- on the tokens both servers chose alike, its log-probs differ from the fp16 server's by what that
  simulation predicts for those tokens (fp16 vs fp8 `generate`), and by far more than the fp16 server
  differs from the unquantized model: an engine served in fp16 by mistake fails both.

Why not the perplexity `evaluate` reports: with fp8 rounding, a log-prob moves by ~0.1 nats when its
inputs change by 1e-6 (a value crosses a rounding boundary), and evaluate's teacher-forced forward pass
and decoding one token at a time differ by that much on the demo (0.07-0.10 nats/token measured), as
large as the fp16 -> fp8 change itself. Decoding is what a server does, so decoding is the reference.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from llm_stream import llm_generate

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPTS = ("The capital of France is", "Water boils at a temperature of", "def fibonacci(n):")
NEW_TOKENS = 16


def _generate_in_process(model, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
    """transformers' greedy `generate` with per-token log-probs (log-softmax of the chosen token)."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=model.generation_config.eos_token_id)
    tokens = out.sequences[0, len(prompt_ids):].tolist()
    return tokens, [float(torch.log_softmax(score[0].float(), -1)[t]) for score, t in zip(out.scores, tokens)]


def _mean_abs(a: list[float], b: list[float]) -> float:
    return statistics.mean(abs(x - y) for x, y in zip(a, b))


def test_fp8_engine_serves_fp8_log_probs(demo_hf_dir: Path, demo_engine: Path, demo_server, session_build_root: Path,
                                         monkeypatch: pytest.MonkeyPatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.core.cpus import reference_threads

    from pipeline.build.reference_folder import write_reference_engine_dir
    from pipeline.reference_runtime.engine import SIMULATION_CALIB_SIZE
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server
    from pipeline.quantization.simulated import load_reference_model

    tokenizer = AutoTokenizer.from_pretrained(demo_engine / "tokenizer", trust_remote_code=False)
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    served16 = [llm_generate(demo_server.grpc_url, ids, NEW_TOKENS, min_tokens=NEW_TOKENS, return_log_probs=True)
                for ids in prompts]
    assert all(r.ok for r in served16), [r.error for r in served16]

    build_config = json.loads((demo_engine / "config.json").read_text())["build_config"]  # the same limits
    engine = write_reference_engine_dir(demo_hf_dir, session_build_root / "smollm2-demo" / "engines" / "ref-fp8-kvfp8",
                                        build_config, simulated_quant=("fp8", "fp8"))
    repo = render(RenderSpec(engine=engine, runtime="reference")).repo
    log = session_build_root / "logs" / "fp8-tritonserver.log"
    with start_server(ServerSpec(repo=repo, log_file=log, ready_timeout_s=600, warmup=False,
                                 extra_args=("--exit-timeout-secs=5",))) as server:
        served8 = [llm_generate(server.grpc_url, ids, NEW_TOKENS, min_tokens=NEW_TOKENS, return_log_probs=True)
                   for ids in prompts]  # one at a time: the same shapes as `generate` below
    assert all(r.ok for r in served8), [r.error for r in served8]
    assert "fp8 (KV fp8) simulated with ModelOpt fake quantization" in log.read_text()

    # in-process as in the server: its thread count and attention settings (fp8 rounding turns 1e-7 into tokens)
    torch.set_num_threads(reference_threads())
    monkeypatch.setenv("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    base = AutoModelForCausalLM.from_pretrained(demo_engine / "model", dtype=torch.float32, attn_implementation="sdpa",
                                                trust_remote_code=False)
    sim8, _ = load_reference_model(engine / "model", "fp8", "fp8", calib_size=SIMULATION_CALIB_SIZE)
    shifts_served, shifts_predicted, fp16_vs_base = [], [], []
    for ids, r16, r8 in zip(prompts, served16, served8):
        tokens8, logprobs8 = _generate_in_process(sim8, ids)
        tokens16, logprobs16 = _generate_in_process(base, ids)
        # the fp8 server is the simulated fp8 model, decoded
        assert r8.tokens == tokens8
        assert _mean_abs(r8.log_probs, logprobs8) < 1e-3, (r8.log_probs, logprobs8)
        # the fp16 server is the unquantized checkpoint (fp32 compute, as the runtime serves fp16), decoded
        assert r16.tokens == tokens16
        fp16_vs_base.append(_mean_abs(r16.log_probs, logprobs16))
        same = next((i for i, (a, b) in enumerate(zip(r8.tokens, r16.tokens)) if a != b), NEW_TOKENS)
        shifts_served += [a - b for a, b in zip(r8.log_probs[:same], r16.log_probs[:same])]
        shifts_predicted += [a - b for a, b in zip(logprobs8[:same], logprobs16[:same])]
        print(f"{tokenizer.decode(ids)!r}: fp16 {tokenizer.decode(r16.tokens)!r} | fp8 {tokenizer.decode(r8.tokens)!r} "
              f"(same for {same} tokens)")
    assert len(shifts_served) >= 8, "fp8 and fp16 agree on too few tokens to compare their log-probs"
    served_abs = statistics.mean(abs(s) for s in shifts_served)
    print(f"fp16 -> fp8 log-prob change on {len(shifts_served)} shared tokens: served mean |d| {served_abs:.4f}, "
          f"predicted {statistics.mean(abs(s) for s in shifts_predicted):.4f}; fp16 server vs unquantized "
          f"{max(fp16_vs_base):.5f}")
    assert _mean_abs(shifts_served, shifts_predicted) < 1e-3
    assert served_abs > 0.005 and served_abs > 10 * max(fp16_vs_base)

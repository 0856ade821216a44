"""The reference runtime serves the precision an engine was built for (ModelOpt fake quantization)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.client import generate

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The capital of France is"


def test_fp8_engine_is_served_with_simulated_fp8_numerics(demo_hf_dir: Path, demo_engine: Path, demo_server,
                                                          session_build_root: Path):
    from pipeline.reference_engine import write_reference_engine_dir
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    build_config = json.loads((demo_engine / "config.json").read_text())["build_config"]  # the same limits
    engine = write_reference_engine_dir(demo_hf_dir, session_build_root / "smollm2-demo" / "engines" / "ref-fp8-kvfp8",
                                        build_config, simulated_quant=("fp8", "fp8"))
    repo = render(RenderSpec(engine=engine, runtime="reference")).repo
    log = session_build_root / "logs" / "fp8-tritonserver.log"
    baseline = generate(demo_server.grpc_url, "ensemble", PROMPT, max_tokens=12, top_k=1)
    assert baseline.ok, baseline.error
    with start_server(ServerSpec(repo=repo, log_file=log, ready_timeout_s=600, warmup=False,
                                 extra_args=("--exit-timeout-secs=5",))) as server:
        answer = generate(server.grpc_url, "ensemble", PROMPT, max_tokens=12, top_k=1)
    assert answer.ok, answer.error
    assert answer.text.strip(), "the fp8-simulated model answered nothing"
    text = log.read_text()
    assert "fp8 (KV fp8) simulated with ModelOpt fake quantization" in text
    # same greedy prompt, different numerics: the answers may agree, but the runtime really ran fp8
    print(f"fp16: {baseline.text!r}\nfp8+fp8 KV: {answer.text!r}")

"""A draft-target deployment of the demo served by tritonserver (one server for every check): the BLS's
draft->target loop gives the text the BLS gives without speculation, a streaming speculative request gets NVIDIA's
error, and NVIDIA's own clients run unchanged (tensorrtllm_backend @c2e65b88 inflight_batcher_llm/client/
end_to_end_grpc_client.py against the BLS of this deployment: at c2e65b88 it has num_draft_tokens in
run_inference() but no --num-draft-tokens flag, so _bls above sends that input; inflight_batcher_llm_client.py
--return-perf-metrics prints the acceptance figures), taken
from a tensorrtllm_backend checkout ($TENSORRTLLM_BACKEND_CHECKOUT, as scripts/nvidia_clients.sh takes one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from speculative_cases import speculative_folder

pytestmark = [pytest.mark.slow, pytest.mark.server]
CHECKOUT = Path(os.environ.get("TENSORRTLLM_BACKEND_CHECKOUT", "/nonexistent"))
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def spec_server(demo_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    build = tmp_path_factory.mktemp("spec") / "build"
    engine = speculative_folder(demo_hf_dir, build / "smollm2" / "engines" / "spec-dt",
                                {"method": "draft-target", "max_draft_len": 4, "draft_dir": "draft"})
    repo = render(RenderSpec(engine=engine, runtime="reference", decoupled=False)).repo
    spec = ServerSpec(repo=repo, log_file=build / "logs" / "spec-tritonserver.log", ready_timeout_s=600, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server, engine


def _bls(url: str, num_draft: int, stream: bool = False):
    import tritonclient.grpc as grpcclient

    values = {"text_input": np.array([[PROMPT.encode()]], dtype=object), "max_tokens": np.array([[16]], dtype=np.int32),
              "num_draft_tokens": np.array([[num_draft]], dtype=np.int32), "stream": np.array([[stream]], dtype=bool),
              "return_perf_metrics": np.array([[True]], dtype=bool)}
    inputs = []
    for name, value in values.items():
        tensor = grpcclient.InferInput(name, value.shape, {"O": "BYTES", "i": "INT32", "b": "BOOL"}[value.dtype.kind])
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    with grpcclient.InferenceServerClient(url) as client:
        return client.infer("tensorrt_llm_bls", inputs)


def test_bls_speculation_gives_the_text_without_it(spec_server) -> None:
    server, _ = spec_server
    plain = _bls(server.grpc_url, 0).as_numpy("text_output").reshape(-1)[0]
    speculative = _bls(server.grpc_url, 3)
    assert speculative.as_numpy("text_output").reshape(-1)[0] == plain
    assert speculative.as_numpy("total_draft_tokens").reshape(-1)[0] >= 0


def test_streaming_speculation_gets_nvidias_error(spec_server) -> None:
    from tritonclient.utils import InferenceServerException

    server, _ = spec_server
    with pytest.raises(InferenceServerException, match="streaming is not supported with speculative decoding"):
        _bls(server.grpc_url, 3, stream=True)


@pytest.mark.skipif(not (CHECKOUT / "inflight_batcher_llm" / "client").is_dir(),
                    reason="set TENSORRTLLM_BACKEND_CHECKOUT to a tensorrtllm_backend checkout (we ran c2e65b88)")
def test_nvidias_clients_run_unchanged(spec_server) -> None:
    server, engine = spec_server
    client = CHECKOUT / "inflight_batcher_llm" / "client"
    e2e = subprocess.run([sys.executable, str(client / "end_to_end_grpc_client.py"), "-u", server.grpc_url,
                          "--model-name", "tensorrt_llm_bls", "-o", "16", "-p", PROMPT],
                         capture_output=True, text=True, timeout=300)
    assert e2e.returncode == 0 and "Received an error" not in e2e.stdout, e2e.stdout + e2e.stderr
    assert "Paris" in e2e.stdout
    direct = subprocess.run([sys.executable, str(client / "inflight_batcher_llm_client.py"), "-u", server.grpc_url,
                             "--tokenizer-dir", str(engine / "tokenizer"), "--text", PROMPT, "--request-output-len",
                             "16", "--return-perf-metrics"], capture_output=True, text=True, timeout=300)
    assert direct.returncode == 0, direct.stdout + direct.stderr
    assert "acceptance_rate" in direct.stdout.lower() or "acceptance rate" in direct.stdout.lower(), direct.stdout

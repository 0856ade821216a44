"""`pipeline smoke` and `pipeline bench` against a real Triton LLM-API repository: a CPU PyTorch-backend
deployable of the demo model rendered into TensorRT-LLM's LLM-API layout (text_input, streaming,
sampling_param_* -> text_output, finish_reason) and served by tritonserver with the reference runtime behind
that contract. The contract is detected from the served config, with and without --model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.cli import run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llmapi_helpers import OPTIONS_YAML, make_deployable  # noqa: E402

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def llmapi_server(demo_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    build = tmp_path_factory.mktemp("llmapi-clients") / "build"
    deployable = make_deployable(build, hf_dir=demo_hf_dir, gpu="cpu")
    repo = render(RenderSpec(engine=deployable)).repo
    spec = ServerSpec(repo=repo, log_file=build / "logs" / "llmapi-tritonserver.log", ready_timeout_s=600, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server, deployable


def test_contract_is_read_from_the_served_config(llmapi_server) -> None:
    from pipeline.clients.contract import detect

    server, _ = llmapi_server
    served = detect(server.grpc_url)  # no --model: the repository has no ensemble, its LLM-API model is found
    assert served.kind == "triton-llmapi" and served.model == "tensorrt_llm"
    assert {"text_input", "streaming", "sampling_param_max_tokens"} <= served.inputs
    assert detect(server.grpc_url, "tensorrt_llm").kind == "triton-llmapi"
    # the tokenizer is the bundle's model/, named in config.pbtxt as preprocessing names it in an engine repository
    assert served.tokenizer_dir is not None and (served.tokenizer_dir / "tokenizer_config.json").is_file()
    assert served.tokenizer_dir.name == "model" and served.tokenizer_dir.parent.name == "1"


def test_smoke_over_llmapi(llmapi_server, capsys) -> None:
    server, _ = llmapi_server
    code = run(["smoke", "--url", server.grpc_url, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in data["checks"] if not c["passed"]]
    assert data["contract"] == "triton-llmapi" and data["model"] == "tensorrt_llm"
    names = [c["name"] for c in data["checks"]]
    assert names[0] == "live_ready" and names[-2:] == ["concurrent_8", "too_long_prompt"]
    assert "ensemble" not in " ".join(names)  # no BLS/ensemble pair in this repository
    assert data["answer"]


def test_bench_over_llmapi(llmapi_server, tmp_path) -> None:
    """No --tokenizer: bench reads it from the served config, as for an engine repository."""
    server, _ = llmapi_server
    code = run(["bench", "--url", server.grpc_url, "--concurrency", "1,2",
                "--requests", "2", "--isl", "16", "--osl", "4", "--warmup", "1", "--slo", "error_rate=0",
                "--out", str(tmp_path)])
    assert code == 0
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("bench-")]
    data = json.loads((folder / "bench.json").read_text())
    for level in data["levels"]:
        assert level["completed"] == 2 and level["errors"] == 0
        for request in level["per_request"]:
            assert 1 <= request["osl"] <= 4 and request["isl"] == 16
    assert any("LLM-API contract" in note for note in data["notes"])


@pytest.fixture(scope="module")
def fp8_llmapi_server(demo_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """What `convert --quant fp8 --format hf` + `build --backend pytorch --gpu cpu` gives: model/ holds the 16-bit
    source and the reference runtime simulates fp8 over it (ModelOpt fake quantization), prefix reuse on."""
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    build = tmp_path_factory.mktemp("llmapi-fp8") / "build"
    options = OPTIONS_YAML.replace("enable_block_reuse: false", "enable_block_reuse: true").replace("max_seq_len: 512",
                                                                                                  "max_seq_len: 2048")
    deployable = make_deployable(build, hf_dir=demo_hf_dir, gpu="cpu", options=options,
                                 simulated={"quant": "fp8", "kv_cache": "auto"})
    repo = render(RenderSpec(engine=deployable)).repo
    spec = ServerSpec(repo=repo, log_file=build / "logs" / "llmapi-fp8.log", ready_timeout_s=600, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server


def test_every_smoke_check_passes_on_a_simulated_fp8_llmapi_repository(fp8_llmapi_server, capsys) -> None:
    """Issue 21 item 11: `pipeline smoke`, streaming included, on the fp8 deployable a user gets on the CPU."""
    code = run(["smoke", "--url", fp8_llmapi_server.grpc_url, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, [c for c in data["checks"] if not c["passed"]]
    assert "streaming" in [c["name"] for c in data["checks"]] and data["contract"] == "triton-llmapi"

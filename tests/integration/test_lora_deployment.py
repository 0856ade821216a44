"""A LoRA deployment on the CPU, for real: the demo model built with two PEFT adapters (`pipeline build --gpu cpu
--lora`), rendered (the adapters ship as lora_prefetch_dir) and served by tritonserver; smoke's lora check passes
(the adapter answers, differs from base, base unchanged) and bench --lora-mix reports each adapter against base.
One server start covers every check."""

from __future__ import annotations

import pytest

from build_cases import in_build_root
from lora_cases import ATTENTION, MLP, bench_lora_mix, make_adapter, smoke_lora

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def lora_server(demo_hf_dir, session_build_root, tmp_path_factory):
    from pipeline.build import BuildSpec, build_engine
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    root = tmp_path_factory.mktemp("lora-deploy")
    sql = make_adapter(demo_hf_dir, root / "sql", rank=8, targets=ATTENTION, scale=0.2)
    chat = make_adapter(demo_hf_dir, root / "chat", rank=4, targets=ATTENTION + MLP, seed=2, scale=0.2)
    with in_build_root(session_build_root):  # beside the demo model, not in the checkout's build/
        engine = build_engine(BuildSpec(gpu="cpu", checkpoint=demo_hf_dir, max_batch_size=4, max_input_len=256,
                                        max_seq_len=512, lora=(f"sql={sql}", f"chat={chat}"))).engine_dir
    repo = render(RenderSpec(engine=engine, runtime="reference", out=root / "repo")).repo
    spec = ServerSpec(repo=repo, log_file=root / "server.log", ready_timeout_s=600, warmup=True, exit_timeout_s=5)
    with start_server(spec) as server:
        yield server, engine, repo


def test_smoke_lora_check_passes(lora_server, capsys):
    server, engine, _ = lora_server
    smoke_lora(server.grpc_url, "--skip", "too_long_prompt", capsys=capsys)


def test_bench_lora_mix_reports_adapters_against_base(lora_server, tmp_path, capsys):
    server, engine, repo = lora_server
    bench_lora_mix(server.grpc_url, repo, tmp_path, capsys)
    assert "## LoRA adapters against base requests" in next(tmp_path.rglob("summary.md")).read_text()

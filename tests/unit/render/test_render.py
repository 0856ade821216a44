"""render: the rendered repository parses, uses the backend its runtime needs, takes the operator's options, and is
written atomically (or reused). The checks of a rendered repository are tested in test_render_checks.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.render.model_repo import parse_model_config, templates_dir
from pipeline.render import RenderSpec, render

from render_cases import configs as _configs, reference_engine_dir, trtllm_engine_dir


@pytest.fixture()
def reference_engine(tmp_path: Path) -> Path:
    return reference_engine_dir(tmp_path)


@pytest.fixture()
def trtllm_engine(tmp_path: Path) -> Path:
    return trtllm_engine_dir(tmp_path)


def _param(config, key: str) -> str:
    return config.parameters[key].string_value


def test_reference_repository_parses_and_uses_the_python_backend(reference_engine: Path, tmp_path: Path) -> None:
    result = render(RenderSpec(engine=reference_engine, out=tmp_path / "repo"))
    configs = _configs(result.repo)
    assert result.runtime == "reference"
    assert configs["tensorrt_llm"].backend == "python"
    assert configs["tensorrt_llm"].model_transaction_policy.decoupled is True
    assert {c.max_batch_size for c in configs.values()} == {4}  # from the engine, not the user
    assert (result.repo / "tensorrt_llm" / "1" / "model.py").is_file()
    assert configs["tensorrt_llm_bls"].instance_group[0].count == 4
    # a bundle: the engine and tokenizer live inside the repository, and the configs say so
    assert _param(configs["tensorrt_llm"], "gpt_model_path") == str(result.repo / "tensorrt_llm" / "1")
    assert _param(configs["preprocessing"], "tokenizer_dir") == str(result.repo / "tensorrt_llm" / "1" / "tokenizer")
    assert (result.repo / "tensorrt_llm" / "1" / "model" / "model.safetensors").is_file()
    assert set(result.checks) == {"protobuf", "placeholders", "ensemble", "contract", "paths"}


def test_tensorrtllm_repository_uses_the_cpp_backend(trtllm_engine: Path, tmp_path: Path) -> None:
    result = render(RenderSpec(engine=trtllm_engine, out=tmp_path / "repo"))
    configs = _configs(result.repo)
    assert result.runtime == "tensorrtllm"
    assert configs["tensorrt_llm"].backend == "tensorrtllm"
    assert not (result.repo / "tensorrt_llm" / "1" / "model.py").exists()
    assert _param(configs["tensorrt_llm"], "gpt_model_type") == "inflight_fused_batching"
    assert _param(configs["tensorrt_llm"], "enable_kv_cache_reuse") == "true"
    assert configs["ensemble"].max_batch_size == 64


def test_no_template_syntax_survives(reference_engine: Path, tmp_path: Path) -> None:
    repo = render(RenderSpec(engine=reference_engine, out=tmp_path / "repo")).repo
    for path in repo.rglob("*"):
        if path.is_file() and path.suffix in (".pbtxt", ".py"):
            text = path.read_text()
            assert "${" not in text and "{{" not in text and "{%" not in text, path


def test_a_broken_template_publishes_nothing(reference_engine: Path, tmp_path: Path, monkeypatch) -> None:
    broken = tmp_path / "templates"
    shutil.copytree(templates_dir(), broken)
    path = broken / "postprocessing" / "config.pbtxt.j2"
    path.write_text(path.read_text().replace("{{ triton_max_batch_size }}", "{{ triton_max_batch_sise }}"))
    monkeypatch.setenv("PIPELINE_TEMPLATES_DIR", str(broken))
    out = tmp_path / "repo"
    with pytest.raises(StageFailedError, match="triton_max_batch_sise"):
        render(RenderSpec(engine=reference_engine, out=out))
    assert not out.exists()
    assert not list(tmp_path.glob(".repo.tmp-*"))


def test_same_inputs_are_a_no_op_and_options_rerender(reference_engine: Path, tmp_path: Path) -> None:
    out = tmp_path / "repo"
    assert render(RenderSpec(engine=reference_engine, out=out)).reused is False
    assert render(RenderSpec(engine=reference_engine, out=out)).reused is True
    again = render(RenderSpec(engine=reference_engine, out=out, max_queue_size=16))
    assert again.reused is False
    policy = parse_model_config(out / "tensorrt_llm" / "config.pbtxt").dynamic_batching.default_queue_policy
    assert policy.max_queue_size == 16


def test_operator_options_reach_the_configs(trtllm_engine: Path, tmp_path: Path) -> None:
    spec = RenderSpec(engine=trtllm_engine, out=tmp_path / "repo", decoupled=False, batching_strategy="V1",
                      batch_scheduler_policy="max_utilization", kv_cache_free_gpu_mem_fraction=0.5,
                      max_tokens_in_paged_kv_cache=4096, enable_kv_cache_reuse=False, enable_chunked_context=True,
                      exclude_input_in_output=True, max_queue_delay_us=100, max_queue_size=32,
                      queue_timeout_us=5_000_000, instances=3, bls_instances=2, logits_dtype="fp32")
    configs = _configs(render(spec).repo)
    llm = configs["tensorrt_llm"]
    assert llm.model_transaction_policy.decoupled is False
    assert configs["tensorrt_llm_bls"].model_transaction_policy.decoupled is False
    assert {k: _param(llm, k) for k in ("gpt_model_type", "batch_scheduler_policy", "kv_cache_free_gpu_mem_fraction",
                                        "max_tokens_in_paged_kv_cache", "enable_kv_cache_reuse",
                                        "enable_chunked_context", "exclude_input_in_output")} == {
        "gpt_model_type": "V1", "batch_scheduler_policy": "max_utilization", "kv_cache_free_gpu_mem_fraction": "0.5",
        "max_tokens_in_paged_kv_cache": "4096", "enable_kv_cache_reuse": "false", "enable_chunked_context": "true",
        "exclude_input_in_output": "true"}
    assert llm.dynamic_batching.max_queue_delay_microseconds == 100
    policy = llm.dynamic_batching.default_queue_policy
    assert (policy.max_queue_size, policy.default_timeout_microseconds, policy.allow_timeout_override) == (32, 5_000_000, True)
    assert configs["preprocessing"].instance_group[0].count == 3
    assert configs["postprocessing"].instance_group[0].count == 3
    assert configs["tensorrt_llm_bls"].instance_group[0].count == 2
    from tritonclient.grpc import model_config_pb2

    logits = [o for o in configs["ensemble"].output if o.name == "context_logits"][0]
    assert logits.data_type == model_config_pb2.TYPE_FP32


def test_runtime_must_match_the_engine(reference_engine: Path, trtllm_engine: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="reference-runtime folder"):
        render(RenderSpec(engine=reference_engine, out=tmp_path / "a", runtime="tensorrtllm"))
    with pytest.raises(InvalidInputError, match="holds TensorRT engines"):
        render(RenderSpec(engine=trtllm_engine, out=tmp_path / "b", runtime="reference"))
    with pytest.raises(InvalidInputError, match="no config.json"):
        render(RenderSpec(engine=tmp_path, out=tmp_path / "c"))


def test_default_output_is_under_build(reference_engine: Path, tmp_path: Path) -> None:
    engine = tmp_path / "build" / "demo" / "engines" / "abc123"
    shutil.copytree(reference_engine, engine)
    result = render(RenderSpec(engine=engine))
    assert result.repo == tmp_path / "build" / "demo" / "triton" / "abc123"
    elsewhere = tmp_path / "somewhere" / "ref"
    shutil.copytree(reference_engine, elsewhere)
    with pytest.raises(InvalidInputError, match="--out"):
        render(RenderSpec(engine=elsewhere))  # not under build/<model>/engines/<id>


def test_cli_render(reference_engine: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "repo"
    assert cli.run(["render", "--engine", str(reference_engine), "--out", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runtime"] == "reference" and Path(data["repo"]) == out
    assert cli.run(["render", "--engine", str(reference_engine), "--out", str(out), "--runtime", "vllm"]) == 2
    assert cli.run(["render", "--engine", str(reference_engine), "--out", str(out), "--logits-dtype", "fp64"]) == 2
    assert cli.run(["render", "--engine", str(tmp_path / "missing"), "--out", str(out)]) == 2



def test_the_reference_model_refuses_a_pipeline_other_than_the_one_that_rendered_it(reference_engine: Path,
                                                                                   tmp_path: Path) -> None:
    """The bundle's reference tensorrt_llm model imports whatever `pipeline` the server's environment has: render records
    its own version, and the model's initialize (check_rendered_by, called first) refuses another one."""
    import pipeline
    from pipeline.reference_runtime.settings import SettingsError, check_rendered_by

    repo = render(RenderSpec(engine=reference_engine, out=tmp_path / "repo")).repo
    manifest = json.loads((repo / "manifest.json").read_text())
    assert manifest["pipeline_version"] == pipeline.__version__
    check_rendered_by(str(repo / "tensorrt_llm"))  # the same pipeline: loads
    assert "check_rendered_by(args[\"model_repository\"])" in (repo / "tensorrt_llm" / "1" / "model.py").read_text()
    manifest["pipeline_version"] = "0.0.1"
    (repo / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SettingsError, match=f"rendered by pipeline 0.0.1, and this server imports pipeline {pipeline.__version__}"):
        check_rendered_by(str(repo / "tensorrt_llm"))
    del manifest["pipeline_version"]
    (repo / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SettingsError, match="did not record itself"):
        check_rendered_by(str(repo / "tensorrt_llm"))


def test_every_python_model_gets_the_support_module_it_imports(reference_engine: Path, trtllm_engine: Path,
                                                                tmp_path: Path) -> None:
    """The image's Python has no pipeline to import shared code from (tool_env.py): each model.py imports
    pipeline_model_support from its own folder, which the stub puts on sys.path (python_backend @f9088ff6
    src/pb_stub.cc:2061-2068), so render writes it beside each one, identical to the template."""
    import ast
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from llmapi_helpers import make_deployable

    support = templates_dir() / "pipeline_model_support.py"
    repos = [render(RenderSpec(engine=engine, out=tmp_path / name)).repo
             for name, engine in (("ref", reference_engine), ("trt", trtllm_engine),
                                  ("llmapi", make_deployable(tmp_path / "build")))]
    models = [path for repo in repos for path in sorted(repo.glob("*/1/model.py"))]
    assert len(models) == 4 + 3 + 1
    for model in models:
        assert (model.parent / support.name).read_bytes() == support.read_bytes(), model
        imported = {node.module for node in ast.walk(ast.parse(model.read_text())) if isinstance(node, ast.ImportFrom)}
        assert "pipeline_model_support" in imported, model


@pytest.mark.parametrize("dtype,triton_type", [("bfloat16", "TYPE_BF16"), ("float16", "TYPE_FP16"),
                                               ("float32", "TYPE_FP32")])
def test_lora_weights_are_declared_in_the_engines_dtype(trtllm_engine: Path, tmp_path: Path, dtype, triton_type) -> None:
    """NVIDIA's runtime takes LoRA weights only in the engine's dtype (loraUtils.cpp "Expected lora weights to be the
    same data type as base model"): tensorrt_llm, ensemble and BLS declare lora_weights with it."""
    from tritonclient.grpc import model_config_pb2

    config = json.loads((trtllm_engine / "config.json").read_text())
    config["pretrained_config"]["dtype"] = dtype
    (trtllm_engine / "config.json").write_text(json.dumps(config))
    configs = _configs(render(RenderSpec(engine=trtllm_engine, out=tmp_path / "repo")).repo)
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        declared = {t.name: t for t in configs[model].input}
        assert model_config_pb2.DataType.Name(declared["lora_weights"].data_type) == triton_type, model
        assert model_config_pb2.DataType.Name(declared["lora_config"].data_type) == "TYPE_INT32", model
        assert model_config_pb2.DataType.Name(declared["lora_task_id"].data_type) == "TYPE_UINT64", model

"""The rendered GPU repository against facts read from NVIDIA's C++ backend's source (what can be checked without
running it: that it loads there is not run here).

- every parameter the backend reads without a default is rendered (shared/reference/
  triton_trtllm_required_parameters.tsv: tensorrtllm_backend @c2e65b88 model_instance_state.cc:62,
  413-415), and a repository without one is refused before it is written;
- the declared logits type is the engine's own (trtllm-build's --logits_dtype lands in
  pretrained_config.logits_dtype: TensorRT-LLM tensorrt_llm/commands/build.py @008b2b8d passes it to
  build_model); the backend refuses logits requests when the two differ;
- prefix caching is rendered on only where the engine was built with paged context FMHA, which the
  build flags decide (pipeline/build/flags.py) and the engine's plugin_config records;
- the BLS model runs a bounded number of Python stubs whatever the engine's max_batch_size.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.build.flags import trtllm_flags
from pipeline.build.memory import EngineTarget, Limits
from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import get_gpu
from pipeline.render.model_repo import parse_model_config
from pipeline.planner import model_spec_from_config
from pipeline.core.quant import kv_cache_format, quant_format
from pipeline.render import MODELS, RenderSpec, render
from pipeline.render.checks import check_repository

LLAMA_8B = Path(__file__).resolve().parents[1] / "fixtures" / "llama-3.1-8b"


def _tokenizer(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def engine_from_flags(root: Path, gpu: str, quant: str, kv: str, *, max_batch_size: int = 64) -> Path:
    """The config.json trtllm-build would write for our own flags: plugin_config from the
    --use_paged_context_fmha / --use_fp8_context_fmha / --tokens_per_block values, logits_dtype from
    --logits_dtype (what build.py hands to build_model)."""
    limits = Limits(max_batch_size=max_batch_size, max_input_len=1024, max_seq_len=2048, max_num_tokens=4096)
    target = EngineTarget(model_spec_from_config(LLAMA_8B), get_gpu(gpu), quant_format(quant), kv_cache_format(kv), 1, 1, "latency")
    flags = {f.name: f.value for f in trtllm_flags(target, limits)}
    engine = root / "engines" / f"{gpu}-{quant}-{kv}"
    engine.mkdir(parents=True)
    (engine / "config.json").write_text(json.dumps({
        "version": "1.1.0",
        "pretrained_config": {
            "architecture": "LlamaForCausalLM", "dtype": "float16", "logits_dtype": flags["--logits_dtype"],
            "quantization": {"quant_algo": quant_format(quant).quant_algo,
                             "kv_cache_quant_algo": kv_cache_format(kv).kv_cache_quant_algo},
        },
        "build_config": {
            "max_batch_size": max_batch_size, "max_input_len": 1024, "max_seq_len": 2048, "max_num_tokens": 4096,
            "max_beam_width": 1,
            "plugin_config": {"paged_kv_cache": True, "tokens_per_block": int(flags["--tokens_per_block"]),
                              "use_paged_context_fmha": flags["--use_paged_context_fmha"] == "enable",
                              "use_fp8_context_fmha": flags["--use_fp8_context_fmha"] == "enable"},
        },
    }))
    _tokenizer(engine / "tokenizer")
    return engine


def _param(repo: Path, key: str) -> str:
    return parse_model_config(repo / "tensorrt_llm" / "config.pbtxt").parameters[key].string_value


def test_every_parameter_the_backend_requires_is_rendered(tmp_path: Path, reference_tsv) -> None:
    repo = render(RenderSpec(engine=engine_from_flags(tmp_path, "h100", "fp8", "fp8"), out=tmp_path / "repo")).repo
    config = parse_model_config(repo / "tensorrt_llm" / "config.pbtxt")
    required = [row["parameter_key"] for row in reference_tsv("triton_trtllm_required_parameters.tsv")
                if row["model"] == "tensorrt_llm"]
    assert {"gpt_model_type", "tokenizer_dir", "guided_decoding_backend", "xgrammar_tokenizer_info_path"} <= set(required)
    for key in required:
        assert key in config.parameters, f"{key} is read by the backend without a default"
    # empty = guided decoding off (the backend's reading of an unset value)
    assert _param(repo, "guided_decoding_backend") == "" and _param(repo, "xgrammar_tokenizer_info_path") == ""


def test_a_repository_missing_a_required_parameter_is_refused(tmp_path: Path) -> None:
    repo = render(RenderSpec(engine=engine_from_flags(tmp_path, "h100", "fp16", "auto"), out=tmp_path / "repo")).repo
    broken = tmp_path / "broken"
    shutil.copytree(repo, broken)
    path = broken / "tensorrt_llm" / "config.pbtxt"
    text = path.read_text()
    start = text.index('key: "guided_decoding_backend"')
    block_start, block_end = text.rindex("parameters", 0, start), text.index("}\n}", start) + 3
    path.write_text(text[:block_start] + text[block_end:])
    with pytest.raises(InvalidInputError, match="guided_decoding_backend.*would not load"):
        check_repository(broken)


def test_templates_that_drop_a_required_parameter_exit_2_and_write_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    from pipeline import cli
    from pipeline.render import templates_dir

    templates = tmp_path / "templates"
    shutil.copytree(templates_dir(), templates)
    path = templates / "tensorrt_llm" / "config.pbtxt.j2"
    path.write_text(path.read_text().replace("{% for key, value in tensorrt_llm_parameters.items() %}",
                                             "{% for key, value in tensorrt_llm_parameters.items() if key != 'tokenizer_dir' %}"))
    monkeypatch.setenv("PIPELINE_TEMPLATES_DIR", str(templates))
    engine = engine_from_flags(tmp_path, "h100", "fp16", "auto")
    code = cli.run(["render", "--engine", str(engine), "--out", str(tmp_path / "repo")])
    assert code == 2
    assert "tokenizer_dir" in capsys.readouterr().err
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("gpu,quant,kv", [("h100", "fp8", "fp8"), ("a100", "int8_sq", "int8"), ("l40s", "fp16", "fp8"),
                                          ("h100", "fp16", "auto")])
def test_build_and_render_agree_on_logits_and_prefix_caching(tmp_path: Path, gpu: str, quant: str, kv: str) -> None:
    from tritonclient.grpc import model_config_pb2

    engine = engine_from_flags(tmp_path, gpu, quant, kv)
    result = render(RenderSpec(engine=engine, out=tmp_path / "repo"))
    configs = {m: parse_model_config(result.repo / m / "config.pbtxt") for m in MODELS}
    for model in ("tensorrt_llm", "ensemble", "tensorrt_llm_bls"):
        logits = {t.name: t.data_type for t in configs[model].output}
        assert logits["context_logits"] == logits["generation_logits"] == model_config_pb2.TYPE_FP32, model
    paged = json.loads((engine / "config.json").read_text())["build_config"]["plugin_config"]["use_paged_context_fmha"]
    assert _param(result.repo, "enable_kv_cache_reuse") == ("true" if paged else "false")
    assert bool(result.notes) == (not paged)  # render says when prefix caching is off, and why
    if not paged:
        assert "paged context FMHA" in result.notes[0]
        with pytest.raises(InvalidInputError, match="--enable-kv-cache-reuse needs paged context FMHA"):
            render(RenderSpec(engine=engine, out=tmp_path / "again", enable_kv_cache_reuse=True))
        with pytest.raises(InvalidInputError, match="--enable-chunked-context needs paged context FMHA"):
            render(RenderSpec(engine=engine, out=tmp_path / "again", enable_chunked_context=True))
        assert not (tmp_path / "again").exists()


def test_a_logits_dtype_other_than_the_engines_is_refused(tmp_path: Path) -> None:
    engine = engine_from_flags(tmp_path, "h100", "fp16", "auto")
    with pytest.raises(InvalidInputError, match="does not match the engine's logits_dtype float32"):
        render(RenderSpec(engine=engine, out=tmp_path / "repo", logits_dtype="fp16"))
    assert not (tmp_path / "repo").exists()
    config = json.loads((engine / "config.json").read_text())
    config["pretrained_config"]["logits_dtype"] = "float16"  # an engine built with --logits_dtype float16
    (engine / "config.json").write_text(json.dumps(config))
    repo = render(RenderSpec(engine=engine, out=tmp_path / "repo16")).repo
    from tritonclient.grpc import model_config_pb2

    outputs = {t.name: t.data_type for t in parse_model_config(repo / "ensemble" / "config.pbtxt").output}
    assert outputs["context_logits"] == model_config_pb2.TYPE_FP16


def test_bls_stubs_are_bounded_for_throughput_engines(tmp_path: Path) -> None:
    result = render(RenderSpec(engine=engine_from_flags(tmp_path, "h100", "fp8", "fp8", max_batch_size=1536),
                               out=tmp_path / "repo"))
    bls = parse_model_config(result.repo / "tensorrt_llm_bls" / "config.pbtxt")
    instances = bls.instance_group[0].count
    concurrency = int(bls.parameters["bls_concurrency"].string_value)
    assert instances <= 4 and concurrency == 1536  # any one instance may get every request


def test_dev_shm_is_sized_for_the_python_stubs_the_repository_starts(tmp_path: Path) -> None:
    """Each Python-backend instance maps its own /dev/shm region (python_backend src/python_be.cc): the
    manifests budget one per stub the bundle starts, so the bounded BLS keeps /dev/shm small."""
    from pipeline.k8s import PYTHON_STUB_SHM_BYTES, K8sSpec, python_stub_count, render_manifests
    from pipeline.build.profiles import BuildProfile

    result = render(RenderSpec(engine=engine_from_flags(tmp_path, "h100", "fp8", "fp8", max_batch_size=1536),
                               out=tmp_path / "repo"))
    stubs = python_stub_count(result.repo)
    assert stubs == 1 + 1 + 4  # preprocessing, postprocessing, 4 BLS instances (tensorrt_llm is C++)
    profile = BuildProfile(model="demo", model_revision="rev0", runtime="tensorrtllm", gpu="h100-sxm", quant="fp8")

    def shm_gib(count: int) -> int:
        spec = K8sSpec(profile_id=profile.id, model_store="image", image="registry.example/triton:1")
        files = render_manifests(profile, spec, python_stubs=count)
        pod = next(doc for docs in files.values() for doc in docs if doc.get("kind") == "Deployment")
        volume = next(v for v in pod["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm")
        return int(volume["emptyDir"]["sizeLimit"].removesuffix("Gi"))

    assert shm_gib(stubs) == 3  # 1 GiB base + 1 per GPU + 6 x 64 MiB, rounded up
    assert shm_gib(2 + 1536) >= (2 + 1536) * PYTHON_STUB_SHM_BYTES / (1 << 30)  # one BLS stub per slot: ~96 GiB

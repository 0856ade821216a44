"""The TensorRT-LLM 1.1.0 LLM-API key table (pipeline/data/trtllm_llm_args.tsv), its loader, and the
conformance of every options file `pipeline build --backend pytorch` writes to it."""

from __future__ import annotations

import csv
import importlib.util
import io
import itertools
from pathlib import Path

import pytest
import yaml

from pipeline.build.llm_args import check_options, option_problems, source_commit, top_level_fields
from pipeline.build.memory import Limits
from pipeline.build.pytorch import cuda_graph_batch_sizes, llm_api_options
from pipeline.core.errors import InvalidInputError
from pipeline.core.gpus import get_gpu

TABLE = Path(__file__).resolve().parents[3] / "pipeline" / "data" / "trtllm_llm_args.tsv"


def table_rows() -> list[dict[str, str]]:
    """The table read independently of the loader: csv over the non-comment lines."""
    text = TABLE.read_text(encoding="utf-8")
    body = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(body), delimiter="\t"))


def table_keys() -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for row in table_rows():
        keys.setdefault(row["class"], set()).add(row["field"])
    return keys


def test_table_names_the_release_commit_and_holds_the_four_classes():
    text = TABLE.read_text(encoding="utf-8")
    assert "48b7b5d8b7ed1e6bff57aecc6ff7d1533288bed8" in text and "v1.1.0" in text
    rows = table_rows()
    assert {r["commit"] for r in rows if r["class"] != "LoraConfig"} == {"48b7b5d8b7ed"} == {source_commit()}
    assert {r["commit"] for r in rows if r["class"] == "LoraConfig"} == {"037d4ba10931"}  # lora_helper.py's copy
    assert len({(r["class"], r["field"]) for r in rows}) == len(rows)  # no duplicate field
    keys = table_keys()
    assert set(keys) == {"BaseLlmArgs", "TorchLlmArgs", "KvCacheConfig", "CudaGraphConfig", "LoraConfig",
                         "DecodingBaseConfig", "EagleDecodingConfig", "NGramDecodingConfig"}  # speculative_config's classes
    assert {"lora_dir", "max_lora_rank", "lora_target_modules", "max_loras", "max_cpu_loras"} <= keys["LoraConfig"]
    assert {"max_batch_size", "max_num_tokens", "max_seq_len", "tensor_parallel_size", "kv_cache_config",
            "backend"} <= keys["BaseLlmArgs"]
    assert {"cuda_graph_config", "disable_overlap_scheduler", "attn_backend"} <= keys["TorchLlmArgs"]
    assert {"free_gpu_memory_fraction", "dtype", "enable_block_reuse", "tokens_per_block"} <= keys["KvCacheConfig"]
    assert keys["CudaGraphConfig"] == {"batch_sizes", "max_batch_size", "enable_padding"}
    # TRT-engine-only options live in TrtLlmArgs, not here
    assert "build_config" in keys["TorchLlmArgs"] and "enable_build_cache" not in set().union(*keys.values())


def test_loader_agrees_with_the_table():
    keys = table_keys()
    assert set(top_level_fields()) == keys["BaseLlmArgs"] | keys["TorchLlmArgs"]
    assert top_level_fields()["load_format"].cls == "TorchLlmArgs"  # the subclass's override wins


def _all_planned_options():
    """Options for every GPU class, goal, KV format and tp the planner can choose (tiny and big limits)."""
    for gpu, goal, kv, tp, limits in itertools.product(
        ["cpu", "l4", "a100-80gb", "h100-sxm", "b200"], ["latency", "throughput"], ["auto", "fp8"], [1, 4],
        [Limits(max_input_len=1024, max_seq_len=2048, max_batch_size=4, max_num_tokens=2048),
         Limits(max_input_len=4096, max_seq_len=8192, max_batch_size=384, max_num_tokens=2048)],
    ):
        yield llm_api_options(get_gpu(gpu), kv, tp, goal, limits, "bfloat16" if tp > 1 else None)[0]


def test_every_key_we_write_is_a_field_of_the_1_1_0_classes():
    keys = table_keys()
    top = keys["BaseLlmArgs"] | keys["TorchLlmArgs"]
    nested = {"kv_cache_config": keys["KvCacheConfig"], "cuda_graph_config": keys["CudaGraphConfig"]}
    seen: set[str] = set()
    for options in _all_planned_options():
        assert set(options) <= top, set(options) - top
        for name, fields in nested.items():
            value = options.get(name)
            if isinstance(value, dict):
                assert set(value) <= fields, set(value) - fields
                seen |= {f"{name}.{k}" for k in value}
        seen |= set(options)
    assert {"enable_chunked_prefill", "dtype", "kv_cache_config.dtype", "cuda_graph_config.batch_sizes"} <= seen


def test_written_yaml_conforms(tmp_path, monkeypatch):
    """The file on disk, read back with yaml.safe_load as trtllm-serve reads it."""
    from build_cases import make_hf_checkpoint

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    from pipeline.build import BuildSpec
    from pipeline.build.pytorch import build_pytorch

    ckpt = make_hf_checkpoint(tmp_path / "build" / "tiny" / "checkpoints" / "hf-fp8", quant="fp8", kv="fp8")
    result = build_pytorch(BuildSpec(gpu="h100", checkpoint=ckpt, backend="pytorch"))
    written = yaml.safe_load((result.deploy_dir / "llm_api_options.yaml").read_text())
    keys = table_keys()
    assert set(written) <= keys["BaseLlmArgs"] | keys["TorchLlmArgs"]
    assert set(written["kv_cache_config"]) <= keys["KvCacheConfig"]
    assert set(written["cuda_graph_config"]) <= keys["CudaGraphConfig"]
    assert written["kv_cache_config"]["dtype"] == "fp8" and written["backend"] == "pytorch"


def test_unknown_keys_are_refused_naming_the_nearest_valid_ones():
    with pytest.raises(InvalidInputError) as top:
        check_options({"max_batch_sise": 8, "backend": "pytorch"})
    assert "max_batch_sise" in top.value.message and "max_batch_size" in top.value.message
    assert top.value.exit_code == 2
    with pytest.raises(InvalidInputError) as nested:
        check_options({"kv_cache_config": {"free_gpu_mem_fraction": 0.9}})
    assert "kv_cache_config.free_gpu_mem_fraction" in nested.value.message
    assert "free_gpu_memory_fraction" in nested.value.message
    # a nested class the table does not hold cannot be checked, so it is refused too
    assert option_problems({"scheduler_config": {"capacity_scheduler_policy": "MAX_UTILIZATION"}})
    # wrong value types
    problems = option_problems({"max_batch_size": "8", "cuda_graph_config": {"enable_padding": 1},
                                "kv_cache_config": {"dtype": None}})
    assert len(problems) == 3
    assert option_problems({"cuda_graph_config": None, "max_batch_size": None}) == []


def test_cuda_graph_batch_sizes_are_powers_of_two_plus_the_max():
    assert cuda_graph_batch_sizes(1) == [1]
    assert cuda_graph_batch_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    assert cuda_graph_batch_sizes(384) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 384]


@pytest.mark.skipif(importlib.util.find_spec("tensorrt_llm") is None,
                    reason="tensorrt_llm is not installed here (the pinned GPU image has 1.1.0): TorchLlmArgs itself "
                    "validates our options only there")
def test_tensorrt_llm_accepts_our_options(tmp_path):  # pragma: no cover - GPU image only
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs

    for options in _all_planned_options():
        if options.get("cuda_graph_config") is None:
            continue
        TorchLlmArgs(model=str(tmp_path), **options)

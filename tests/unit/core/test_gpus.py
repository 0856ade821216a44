"""The GPU table and precision formats against shared/reference/ facts, and the `gpus` command."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import run
from pipeline.core.errors import InvalidInputError, UnsupportedError
from pipeline.core.gpus import check_precision, get_gpu, gpu_table
from pipeline.core.quant import KV_CACHE_FORMATS, QUANT_FORMATS, kv_cache_format, quant_format
from pipeline.data import packaged_fact_rows

NUMERIC = ["memory_gib", "hbm_bandwidth_tbps", "dense_bf16_tflops", "dense_fp8_tflops", "dense_int8_tops"]


def test_table_matches_reference_gpus(reference_tsv):
    """Every GPU is the shared reference's or, where it lacks one, pipeline/data/gpus_added.tsv's (never both)."""
    table = gpu_table()
    shared, added = reference_tsv("gpus.tsv"), packaged_fact_rows("gpus_added.tsv")
    assert not {r["key"] for r in shared} & {r["key"] for r in added}, "the shared table has it now: drop our row"
    assert all(r["source"] and r["note"] for r in added)
    rows = shared + added
    assert {r["key"] for r in rows} | {"cpu"} == set(table)
    for row in rows:
        gpu = table[row["key"]]
        assert gpu.product_label == row["product_label"]
        assert gpu.compute_capability == row["compute_capability"]
        assert gpu.nvlink == (row["nvlink"] == "yes")
        for column in NUMERIC:
            if row[column]:  # empty in the reference = not published; ours may fill it (noted)
                assert getattr(gpu, column) == pytest.approx(float(row[column])), (row["key"], column)
        assert ("fp8" in gpu.weight_precisions) == (row["fp8_supported"] == "yes"), row["key"]
        assert ("nvfp4" in gpu.weight_precisions) == (row["nvfp4_supported"] == "yes"), row["key"]


def test_quant_names_and_minimum_sm_match_reference(reference_tsv):
    rows = reference_tsv("trtllm_quant_algos.tsv")
    algos = {r["value"]: r for r in rows if r["kind"] == "quant_algo"}
    kv_algos = {r["value"]: r for r in rows if r["kind"] == "kv_cache_quant_algo"}
    for fmt in QUANT_FORMATS.values():
        if fmt.quant_algo is None:
            continue
        assert fmt.quant_algo in algos, fmt.name
        assert fmt.min_compute_capability == pytest.approx(float(algos[fmt.quant_algo]["min_compute_capability"]))
    for kv in KV_CACHE_FORMATS.values():
        if kv.kv_cache_quant_algo is None:
            continue
        assert kv.kv_cache_quant_algo in kv_algos, kv.name
        assert kv.min_compute_capability == pytest.approx(float(kv_algos[kv.kv_cache_quant_algo]["min_compute_capability"]))


@pytest.mark.parametrize(
    ("gpu", "quant", "kv", "fragment"),
    [
        ("a100-80gb", "fp8", "auto", "cannot run fp8"),
        ("a10g", "fp8", "auto", "cannot run fp8"),
        ("a100-40gb", "fp16", "fp8", "cannot run a fp8 KV cache"),
        ("h100-sxm", "nvfp4", "auto", "cannot run nvfp4"),
        ("l40s", "nvfp4", "auto", "compute capability 10.0"),
    ],
)
def test_impossible_precisions_are_refused_with_what_would_work(gpu, quant, kv, fragment):
    with pytest.raises(UnsupportedError) as caught:
        check_precision(get_gpu(gpu), quant_format(quant), kv_cache_format(kv))
    assert fragment in caught.value.message
    assert caught.value.hint and "use" in caught.value.hint.lower()
    assert caught.value.exit_code == 2


def test_possible_precisions_pass():
    check_precision(get_gpu("h100"), quant_format("fp8"), kv_cache_format("fp8"))
    check_precision(get_gpu("b200"), quant_format("nvfp4"), kv_cache_format("fp8"))
    check_precision(get_gpu("a100-80gb"), quant_format("int4_awq"), kv_cache_format("int8"))


def test_unknown_gpu_lists_valid_keys():
    with pytest.raises(InvalidInputError) as caught:
        get_gpu("rtx-9090")
    assert "rtx-9090" in caught.value.message
    assert "h100-sxm" in caught.value.hint


def test_gpus_command_json(capsys):
    assert run(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    keys = [row["key"] for row in data]
    assert keys[-1] == "cpu" and "h200" in keys
    h200 = next(row for row in data if row["key"] == "h200")
    assert h200["product_label"] == "NVIDIA-H200" and "fp8" in h200["kv_precisions"]


def test_unknown_command_exits_2(capsys):
    assert run(["no-such-command"]) == 2


def test_every_named_modelopt_config_exists():
    from pipeline.quantization.modelopt import quiet_modelopt_import

    mtq = quiet_modelopt_import()
    named = {f.name: f.modelopt_config for f in QUANT_FORMATS.values() if f.modelopt_config}
    assert set(named) == {"fp8", "int8_sq", "int8_wo", "int4_awq", "w4a8_awq", "nvfp4"}
    for name, attribute in named.items():
        assert isinstance(getattr(mtq, attribute, None), dict), (name, attribute)


def test_only_grace_superchips_fix_their_nodes_arch_and_size():
    """GH200 and GB200 share a board with a Grace (Arm) CPU: their nodes are arm64. A GB200 NVL72 compute tray holds
    four GPUs; every other GPU's node is taken as an 8-GPU HGX board unless the user says otherwise."""
    table = gpu_table()
    assert {key for key, gpu in table.items() if gpu.host_arch} == {"gh200", "gb200"}
    for key in ("gh200", "gb200"):
        assert table[key].host_arch == "arm64" and key.upper() in table[key].product_label
    assert {key: gpu.gpus_per_node for key, gpu in table.items() if gpu.gpus_per_node != 8} == {"gb200": 4}

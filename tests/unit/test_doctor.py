"""`pipeline doctor` on this machine (no GPU) and the GPU-name matching it uses for --gpu auto."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import run
from pipeline.doctor import detect_gpu_key, doctor, match_table_key


def test_doctor_here_says_cpu_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    report = doctor()
    if report.gpus:
        pytest.skip("this machine has a GPU; the CPU-only expectations do not apply")
    assert report.summary == "CPU only: reference runtime"
    assert report.runtimes["reference"] == "yes"
    assert report.runtimes["tensorrtllm"].startswith("no:")
    tools = {t.name: t for t in report.tools}
    assert tools["tritonserver"].present and not tools["trtllm-build"].present
    assert tools["torch"].version and report.free_disk_gib > 0
    assert report.build_dir == (tmp_path / "build").resolve()
    assert detect_gpu_key() == "cpu"


def test_doctor_cli(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path))
    assert run(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"gpus", "driver_version", "cuda_version", "tools", "free_disk_gib", "runtimes", "summary"}
    assert run(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "runtime reference" in out and data["summary"] in out


@pytest.mark.parametrize("name,memory,key", [
    ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm"), ("NVIDIA H100 PCIe", 79.6, "h100-pcie"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"), ("NVIDIA A100 80GB PCIe", 79.2, "a100-80gb"),
    ("NVIDIA L40S", 44.5, "l40s"), ("NVIDIA L4", 22.0, "l4"), ("NVIDIA A10G", 22.0, "a10g"),
    ("NVIDIA H200", 140.0, "h200"), ("NVIDIA GH200 480GB", 95.0, "gh200"), ("NVIDIA B200", 179.0, "b200"),
])
def test_nvml_names_map_to_table_keys(name, memory, key):
    assert match_table_key(name, memory) == key


def test_unknown_gpu_name_is_not_guessed():
    assert match_table_key("Tesla T4", 15.0) is None

"""The host's GPUs matched to the GPU table (what --gpu auto resolves to)."""

from __future__ import annotations

import pytest

from pipeline.core import host
from pipeline.core.host import GpuFound, detect_gpu_key, known_gpu_key, match_table_key


@pytest.mark.parametrize("name,memory,key", [
    ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm"), ("NVIDIA H100 PCIe", 79.6, "h100-pcie"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"), ("NVIDIA A100 80GB PCIe", 79.2, "a100-80gb"),
    ("NVIDIA L40S", 44.5, "l40s"), ("NVIDIA L4", 22.0, "l4"), ("NVIDIA A10G", 22.0, "a10g"),
    ("NVIDIA H200", 140.0, "h200"), ("NVIDIA GH200 480GB", 95.0, "gh200"), ("NVIDIA B200", 179.0, "b200"),
    ("NVIDIA GB200", 185.0, "gb200"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 95.6, "rtx-pro-6000"),
])
def test_nvml_names_map_to_table_keys(name, memory, key):
    assert match_table_key(name, memory) == key


def test_unknown_gpu_name_is_not_guessed():
    assert match_table_key("Tesla T4", 15.0) is None
    assert match_table_key("NVIDIA RTX 6000 Ada Generation", 47.5) is None  # not an RTX PRO 6000


def test_gpu_auto_is_cpu_without_gpus_and_the_first_gpus_table_key(monkeypatch):
    monkeypatch.setattr(host, "detect_gpus", lambda: ([], "none", None, None))
    assert detect_gpu_key() == known_gpu_key() == "cpu"
    found = [GpuFound(index=0, name="NVIDIA H100 80GB HBM3", memory_gib=79.6, table_key="h100-sxm")]
    monkeypatch.setattr(host, "detect_gpus", lambda: (found, "nvml", "580.0", "13.0"))
    assert detect_gpu_key() == known_gpu_key() == "h100-sxm"


def test_gpu_auto_refuses_a_gpu_the_table_lacks(monkeypatch):
    from pipeline.core.errors import UnsupportedError

    found = [GpuFound(index=0, name="Tesla T4", memory_gib=15.0, table_key=None)]
    monkeypatch.setattr(host, "detect_gpus", lambda: (found, "nvml", "580.0", "13.0"))
    with pytest.raises(UnsupportedError, match="Tesla T4"):
        detect_gpu_key()
    assert known_gpu_key() is None  # what describes the machine (profiles, serve's engine check) gets no key


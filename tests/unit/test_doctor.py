"""`pipeline doctor` on this machine (no GPU) and on stand-in machines."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import run
from pipeline.doctor import doctor, report_rows
from pipeline.core.host import detect_gpu_key


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


def test_doctor_says_which_model_sizes_convert_and_serve(monkeypatch, tmp_path):
    """A stand-in CPU machine with 20 GiB free, then one with two H100s: the sizes each can take."""
    from pipeline import doctor as doctor_module
    from pipeline.core import resources
    from pipeline.core.host import GpuFound
    from pipeline.core.resources import GIB, GpuMemory, Machine

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    cpu_only = Machine(free_ram_bytes=int(20 * GIB), total_ram_bytes=int(24 * GIB), cpus=2, cuda_note="CPU-only build")
    monkeypatch.setattr(resources, "machine", lambda: cpu_only)
    monkeypatch.setattr(doctor_module, "detect_gpus", lambda: ([], "none", None, None))
    sizes = {s.model: s for s in doctor().sizes}
    assert sizes["SmolLM2-135M (demo)"].serve.startswith("reference runtime (CPU, fp32")
    assert sizes["SmolLM2-135M (demo)"].convert["fp8"].startswith("CPU ~")
    assert sizes["Llama-3.1-8B"].params_b == 8.03 and sizes["Llama-3.1-8B"].convert["fp16"].startswith("CPU ~")
    assert sizes["Llama-3.1-8B"].serve == "no: the reference runtime needs 32 GiB of RAM, 20 free"
    assert sizes["Llama-3.1-70B"].convert["fp16"].startswith("no: needs ")

    h100s = cpu_only.model_copy(update={"gpus": tuple(
        GpuMemory(index=i, name="NVIDIA H100 80GB HBM3", free_bytes=int(79 * GIB), total_bytes=int(80 * GIB)) for i in (0, 1))})
    found = [GpuFound(index=i, name="NVIDIA H100 80GB HBM3", memory_gib=79.6, compute_capability="9.0", table_key="h100-sxm")
             for i in (0, 1)]
    monkeypatch.setattr(resources, "machine", lambda: h100s)
    monkeypatch.setattr(doctor_module, "detect_gpus", lambda: (found, "nvml", "580.0", "13.0"))
    sizes = {s.model: s for s in doctor().sizes}
    assert sizes["Llama-3.1-8B"].convert == {"fp16": "GPU", "fp8": "GPU"}
    assert sizes["Llama-3.1-8B"].serve == "tensorrtllm: fp16 tp1"
    assert sizes["Llama-3.1-70B"].serve == "tensorrtllm: fp16 tp2"
    assert sizes["Llama-3.1-405B"].serve == "no: does not fit 2 x h100-sxm at int4_awq"
    rows = dict(map(tuple, report_rows(doctor())))
    assert rows["Llama-3.1-8B (8.03B)"] == "convert: fp16 GPU, fp8 GPU; serve: tensorrtllm: fp16 tp1"

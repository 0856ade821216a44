"""Where convert and evaluate put a model (pipeline.placement), decided from config.json alone against
stand-in machines: host RAM and GPUs of chosen sizes. Nothing loads here; the figures are bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.errors import UnsupportedError
from pipeline.placement import (
    Job,
    batch_for_free_memory,
    cpu_seconds,
    footprint,
    place,
)
from pipeline.planner import model_spec_from_config
from pipeline.core.resources import GIB, GpuMemory, Machine, cgroup_memory_left

from planner_cases import LLAMA_8B

RATES = (10e9, 0.1e9)  # 10 GFLOP/s matmuls, 0.1 G elements/s reductions: stands in for the CPU probe
FP8 = Job(kind="convert", load_dtype="bfloat16", quant="fp8", quantized=True, samples=64, seq_len=256, batch_size=4)
FP16 = Job(kind="convert", load_dtype="float16", quant="fp16", samples=0)


def host(ram_gib: float, *gpus_gib: float, name: str = "NVIDIA H100 80GB HBM3") -> Machine:
    gpus = tuple(GpuMemory(index=i, name=name, free_bytes=int(g * GIB), total_bytes=int(80 * GIB)) for i, g in enumerate(gpus_gib))
    return Machine(free_ram_bytes=int(ram_gib * GIB), total_ram_bytes=int(max(ram_gib, 1) * GIB), gpus=gpus,
                   cuda_note="" if gpus else "torch 2.13.0+cpu is a CPU-only build", cpus=2)


def test_footprint_of_llama_8b(llama8b) -> None:
    fp = footprint(llama8b, FP8)
    assert fp.params == 8_030_261_248  # Llama 3.1 8B's published parameter count
    assert fp.weights == fp.params * 2
    # one sample of 256 tokens: hidden/QKV/MLP/quantizer copies/logits + 32 heads x 256^2 scores, bf16
    assert fp.per_sample == 256 * 2 * (4 * 4096 + 4096 + 2 * 1024 + 3 * 14336 + 2 * 14336 + 128256) + 32 * 256 * 256 * 2 * 2
    fp16 = footprint(llama8b, FP16)
    assert 0 < fp16.export_transient < fp.export_transient < fp.weights  # fp8 adds fused gate/up and packed copies
    assert fp16.checkpoint == pytest.approx(fp16.weights, rel=0.01)  # untied: the checkpoint is the 16-bit weights
    assert fp.checkpoint == pytest.approx(fp.params + 2 * 128256 * 4096, rel=0.02)  # fp8 layers, 16-bit embeddings + head
    evaluation = footprint(llama8b, Job(kind="evaluate", load_dtype="float32", samples=39, seq_len=512))
    assert evaluation.weights == fp.params * 4 and evaluation.export_transient == evaluation.checkpoint == 0


def test_no_gpu_auto_falls_back_to_the_cpu_with_a_time_estimate(llama8b) -> None:
    placement = place(llama8b, FP8, host(64), "auto", name="llama-8b", rates=RATES)
    assert placement.device == "cpu" and placement.batch_size == 4 and placement.gpus == ()
    assert placement.estimate_s == cpu_seconds(llama8b, FP8, 4, RATES) > 1000
    assert "no GPU for llama-8b (torch 2.13.0+cpu is a CPU-only build)" in placement.warning
    assert "64 x 256 tokens" in placement.warning and "10.0 GFLOP/s" in placement.warning
    assert placement.needed["cpu"] < 64 * GIB


def test_forced_cpu_warns_nothing_and_sizes_the_batch_to_the_ram_left(llama8b) -> None:
    roomy = place(llama8b, FP8, host(64), "cpu")
    assert roomy.warning is None and roomy.batch_size == 4
    fp = roomy.footprint
    # RAM for everything but exactly two samples' activations: the batch shrinks from 4 to 2
    tight = host((fp.runtime + fp.weights + fp.export_transient + fp.per_forward + 2 * fp.per_sample + 1000) / GIB)
    assert place(llama8b, FP8, tight, "cpu").batch_size == 2
    as_many = place(llama8b, FP8.model_copy(update={"batch_size": 0}), host(64), "cpu")
    assert as_many.batch_size == 64  # 0: as many as fit, up to the calibration samples


def test_cuda_without_a_gpu_is_refused(llama8b) -> None:
    with pytest.raises(UnsupportedError) as refused:
        place(llama8b, FP8, host(64), "cuda", name="llama-8b")
    assert refused.value.exit_code == 2
    assert "--device cuda: no GPU here (torch 2.13.0+cpu is a CPU-only build)" in str(refused.value)
    assert "--device cpu (host RAM has room" in refused.value.hint


def test_too_big_for_host_ram_names_the_figures_and_what_would_work(llama8b) -> None:
    with pytest.raises(UnsupportedError) as refused:
        place(llama8b, FP16, host(8), "cpu", name="llama-8b")
    message, hint = str(refused.value), refused.value.hint
    assert "llama-8b does not fit in host RAM: it needs" in message and "8.0 GiB is free" in message
    assert "weights 14.96 GiB (8.03B parameters in float16)" in message and "export buffers" in message
    assert "a GPU machine" in hint and "a machine with 19 GiB of free RAM" in hint
    with pytest.raises(UnsupportedError) as auto:
        place(llama8b, FP16, host(8), "auto")
    assert "does not fit in host RAM" in str(auto.value)


def test_long_calibration_sequences_point_at_calib_max_len(llama8b) -> None:
    long = FP8.model_copy(update={"seq_len": 8192})
    fp = footprint(llama8b, long)
    room = host((fp.runtime + fp.weights + fp.export_transient + fp.per_forward + fp.per_sample // 4) / GIB)
    with pytest.raises(UnsupportedError) as refused:
        place(llama8b, long, room, "cpu")
    assert "batch 1 x 8192 tokens" in str(refused.value)
    assert "--calib-max-len 2048" in refused.value.hint


def test_gpus_get_a_device_map_capped_per_gpu(llama8b) -> None:
    placement = place(llama8b, FP8, host(64, 79, 79), "auto")
    assert placement.device == "cuda" and placement.gpus == (0, 1) and placement.warning is None
    assert set(placement.max_memory) == {"0", "1"} and placement.offload_bytes == 0
    assert sum(placement.max_memory.values()) >= placement.footprint.weights
    for index in ("0", "1"):  # each GPU's cap leaves room for the activations and export buffers
        cap = placement.max_memory[index]
        assert cap * (1 + placement.footprint.export_ratio) + placement.footprint.activations(4) < 79 * GIB
    assert placement.accelerate_max_memory() == {0: placement.max_memory["0"], 1: placement.max_memory["1"]}
    assert place(llama8b, FP8, host(64, 79), "cuda").max_memory.keys() == {"0"}


def test_a_model_bigger_than_the_gpus_is_offloaded_or_refused_with_the_gpu_count() -> None:
    big = model_spec_from_config(LLAMA_8B).model_copy(update={"num_layers": 80, "hidden_size": 8192,
                                                                "intermediate_size": 28672, "num_heads": 64})
    offloaded = place(big, FP16, host(400, 79), "auto")  # 70B-shaped: 141 GiB of bf16 weights
    assert offloaded.device == "cuda" and offloaded.offload_bytes > 60 * GIB
    assert offloaded.max_memory["cpu"] > offloaded.offload_bytes and "offloaded to host RAM" in offloaded.warning
    with pytest.raises(UnsupportedError) as refused:
        place(big, FP16, host(32, 79), "cuda", name="llama-70b")
    assert "llama-70b does not fit the GPUs" in str(refused.value) and "32.0 GiB is free" in str(refused.value)
    assert "more GPUs: 2 x 80 GiB hold it" in refused.value.hint


def test_auto_takes_the_cpu_when_the_gpu_is_too_small(llama8b) -> None:
    placement = place(llama8b, FP16, host(64, 6, name="NVIDIA GeForce RTX 3060"), "auto", rates=RATES)
    assert placement.device == "cpu" and "does not fit the GPUs (cuda:0 NVIDIA GeForce RTX 3060 6.0 GiB free)" in placement.warning


def test_batch_after_loading_follows_what_the_gpu_has_left(llama8b) -> None:
    placement = place(llama8b, FP8, host(64, 79), "cuda")
    assert batch_for_free_memory(placement, {0: 60 * GIB}) == 4
    fp = placement.footprint
    held = min(placement.max_memory["0"], fp.weights)
    squeezed = int(held * fp.export_ratio) + fp.per_forward + (1 << 29) + 2 * fp.per_sample + 1000
    assert batch_for_free_memory(placement, {0: squeezed}) == 2
    assert batch_for_free_memory(placement, {0: 0}) == 1  # never below 1: the OOM split takes over
    cpu = place(llama8b, FP8, host(64), "cpu")
    assert batch_for_free_memory(cpu, {}) == cpu.batch_size


def test_cgroup_memory_limit_counts(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job\n")
    folder = tmp_path / "root" / "job"
    folder.mkdir(parents=True)
    (folder / "memory.max").write_text(str(8 * 1024**3))
    (folder / "memory.current").write_text(str(5 * 1024**3))
    (folder / "memory.stat").write_text(f"anon 1\ninactive_file {1024**3}\n")
    assert cgroup_memory_left(proc, tmp_path / "root") == 4 * 1024**3  # 8 - (5 - 1 reclaimable)
    (folder / "memory.max").write_text("max\n")
    assert cgroup_memory_left(proc, tmp_path / "root") is None
    proc.write_text("4:memory:/box\n")
    v1 = tmp_path / "root" / "memory" / "box"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2 * 1024**3))
    (v1 / "memory.usage_in_bytes").write_text(str(1024**3))
    assert cgroup_memory_left(proc, tmp_path / "root") == 1024**3


def test_gpt2_config_names_are_understood(tmp_path: Path) -> None:
    import json

    from pipeline.placement import model_shape

    folder = tmp_path / "gpt2-like"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                                    "n_inner": None, "vocab_size": 100, "n_positions": 128}))
    shape = model_shape(folder)
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.intermediate_size) == (64, 2, 4, 256)
    assert shape.name == "gpt2-like" and shape.max_position_embeddings == 128
    assert model_shape(LLAMA_8B) == model_spec_from_config(LLAMA_8B)

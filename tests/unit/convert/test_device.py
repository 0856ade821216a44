"""`--device` for convert and evaluate: the GPU path's contract with transformers and ModelOpt (what
from_pretrained, mtq.quantize, accelerate and export_tensorrt_llm_checkpoint receive, on a machine
that stands in for one with two GPUs), and the refusals made before anything loads: no GPU for
`--device cuda`, not enough memory, not enough disk, a Hub model too big for this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from download_fixtures import FakeHub
from pipeline.cli import run
from pipeline.core.resources import GIB, GpuMemory, Machine

TWO_GPUS = Machine(free_ram_bytes=int(64 * GIB), total_ram_bytes=int(64 * GIB), cpus=2, gpus=tuple(
    GpuMemory(index=i, name="NVIDIA H100 80GB HBM3", free_bytes=int(79 * GIB), total_bytes=int(80 * GIB)) for i in (0, 1)))
NO_GPU = Machine(free_ram_bytes=int(64 * GIB), total_ram_bytes=int(64 * GIB), cpus=2,
                 cuda_note="torch 2.13.0+cpu is a CPU-only build")


def never_load(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the model was loaded")


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = run(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


def test_from_pretrained_kwargs_on_the_cpu_are_what_they_were() -> None:
    import torch

    from pipeline.placement import Job, place
    from pipeline.planner import model_spec_from_config
    from pipeline.quantization.modelopt import from_pretrained_kwargs

    before = {"dtype": torch.float16, "trust_remote_code": False, "low_cpu_mem_usage": True}
    assert from_pretrained_kwargs("float16") == before
    shape = model_spec_from_config(Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b")
    cpu = place(shape, Job(samples=0), NO_GPU, "cpu")
    assert from_pretrained_kwargs("float16", cpu) == before
    gpus = place(shape, Job(samples=0), TWO_GPUS, "auto")
    assert from_pretrained_kwargs("bfloat16", gpus) == {
        "dtype": torch.bfloat16, "trust_remote_code": False, "low_cpu_mem_usage": True, "device_map": "auto",
        "max_memory": {0: gpus.max_memory["0"], 1: gpus.max_memory["1"]},
    }


def test_calibration_batches_go_to_the_models_input_device(tiny_ckpt: Path) -> None:
    from transformers import AutoTokenizer

    from pipeline.quantization.modelopt import calibration_batches

    tokenizer = AutoTokenizer.from_pretrained(tiny_ckpt, padding_side="left")
    tokenizer.pad_token = tokenizer.eos_token
    on_meta = calibration_batches(tokenizer, ["w1 w2", "w3"], batch_size=2, max_len=8, device="meta")
    assert {t.device.type for batch in on_meta for t in batch.values()} == {"meta"}
    on_cpu = calibration_batches(tokenizer, ["w1 w2", "w3"], batch_size=2, max_len=8)
    assert on_cpu[0]["input_ids"].tolist() == [[1, 2], [31, 3]]


def test_a_batch_out_of_gpu_memory_is_split_in_halves() -> None:
    import torch

    from pipeline.quantization.modelopt import forward_splitting_on_oom

    seen: list[int] = []

    def model(input_ids: Any, attention_mask: Any) -> None:
        if input_ids.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        seen.append(int(input_ids[0, 0]))

    counter: dict[str, int] = {}
    rows = torch.arange(5).reshape(5, 1)
    forward_splitting_on_oom(model, {"input_ids": rows, "attention_mask": rows}, counter)
    assert seen == [0, 2, 3] and counter == {"splits": 2}  # 5 -> 2 + 3 -> 2 + (1 + 2): every row once, in order

    def always(input_ids: Any, attention_mask: Any) -> None:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.cuda.OutOfMemoryError):
        forward_splitting_on_oom(always, {"input_ids": rows[:1], "attention_mask": rows[:1]})


@pytest.mark.slow
def test_gpu_convert_passes_what_nvidia_passes(tiny_ckpt: Path, build_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Convert on a stand-in two-GPU machine: transformers gets device_map="auto" with a max_memory per
    GPU, ModelOpt the same quantize config and forward loop as on the CPU, accelerate's hooks are
    removed before the export, and the checkpoint has the CPU's identity."""
    import accelerate.hooks
    import modelopt.torch.export
    import modelopt.torch.quantization as mtq
    import torch
    from transformers import AutoModelForCausalLM

    from pipeline.quantization import modelopt as quantize
    from pipeline.core import resources
    from pipeline.convert import ConvertSpec, convert, plan_convert
    from pipeline.core.quant import kv_cache_format, quant_format

    calls: list[tuple[str, Any]] = []
    real_load = AutoModelForCausalLM.from_pretrained.__func__

    def load(cls: Any, folder: Any, **kwargs: Any) -> Any:
        calls.append(("from_pretrained", dict(kwargs)))
        kwargs.pop("device_map"), kwargs.pop("max_memory")  # no CUDA here: load on the CPU
        return real_load(cls, folder, **kwargs)

    real_quantize, real_export = mtq.quantize, modelopt.torch.export.export_tensorrt_llm_checkpoint

    def spy_quantize(model: Any, config: Any, forward_loop: Any = None) -> Any:
        calls.append(("mtq.quantize", (config, forward_loop)))
        return real_quantize(model, config, forward_loop)

    def spy_export(model: Any, decoder_type: str, dtype: Any, **kwargs: Any) -> None:
        calls.append(("export", (decoder_type, dtype, sorted(kwargs))))
        real_export(model, decoder_type, dtype, **kwargs)

    monkeypatch.setattr(resources, "machine", lambda: TWO_GPUS)
    monkeypatch.setattr(quantize, "free_gpu_memory", lambda: {0: int(70 * GIB), 1: int(70 * GIB)})
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(load))
    monkeypatch.setattr(mtq, "quantize", spy_quantize)
    monkeypatch.setattr(modelopt.torch.export, "export_tensorrt_llm_checkpoint", spy_export)
    monkeypatch.setattr(accelerate.hooks, "remove_hook_from_module",
                        lambda module, recurse=False: calls.append(("remove_hook_from_module", recurse)))

    spec = ConvertSpec(model=str(tiny_ckpt), quant="fp8", device="cuda", calib_size=4, calib_max_len=16, root=build_root)
    result = convert(spec)

    assert [name for name, _ in calls] == ["from_pretrained", "mtq.quantize", "remove_hook_from_module", "export"]
    kwargs = calls[0][1]
    assert kwargs["device_map"] == "auto" and kwargs["dtype"] == torch.float16
    assert set(kwargs) == {"dtype", "trust_remote_code", "low_cpu_mem_usage", "device_map", "max_memory"}
    assert set(kwargs["max_memory"]) == {0, 1} and all(0 < v <= 79 * GIB for v in kwargs["max_memory"].values())
    config, forward_loop = calls[1][1]
    assert config["quant_cfg"] == quantize.modelopt_config(quant_format("fp8"), kv_cache_format(None))["quant_cfg"]
    assert callable(forward_loop)
    assert calls[2][1] is True  # recurse=True, as NVIDIA's quantize_by_modelopt.py
    assert calls[3][1] == ("llama", torch.float16, ["export_dir", "inference_pipeline_parallel", "inference_tensor_parallel"])
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["placement"]["device"] == "cuda" and manifest["placement"]["gpus"] == [0, 1]
    assert set(manifest["placement"]["max_memory"]) == {"0", "1"} and manifest["calibration_run"]["batch_size_used"] == 4
    assert result.device == "cuda" and result.ckpt_id == plan_convert(spec.model_copy(update={"device": "cpu"})).ckpt_id


def test_cuda_without_a_gpu_is_refused_before_loading(tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from transformers import AutoModelForCausalLM

    from pipeline.core import resources

    monkeypatch.setattr(resources, "machine", lambda: NO_GPU)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", never_load)
    err = refused(["convert", "--model", str(tiny_ckpt), "--quant", "fp8", "--device", "cuda"], capsys)
    assert "--device cuda: no GPU here (torch 2.13.0+cpu is a CPU-only build)" in err and "--device cpu" in err
    assert not any(build_root.rglob("checkpoints/*"))
    err = refused(["evaluate", "--model", str(tiny_ckpt), "--quant", "fp8", "--device", "cuda", "--out", str(build_root / "r")], capsys)
    assert "--device cuda: no GPU here" in err and not (build_root / "r").exists()


def test_too_little_memory_is_refused_with_the_figures(tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from transformers import AutoModelForCausalLM

    from pipeline.core import resources

    monkeypatch.setattr(resources, "machine", lambda: NO_GPU.model_copy(update={"free_ram_bytes": 100 << 20}))
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", never_load)
    err = refused(["convert", "--model", str(tiny_ckpt), "--quant", "fp16", "--device", "cpu"], capsys)
    assert "does not fit in host RAM: it needs 1.0 GiB on the CPU" in err and "0.1 GiB is free" in err
    assert "a machine with 2 GiB of free RAM" in err
    assert not any(build_root.rglob("checkpoints/*"))


def test_too_little_disk_for_the_checkpoint_is_refused(tiny_ckpt: Path, build_root: Path, monkeypatch, capsys) -> None:
    from transformers import AutoModelForCausalLM

    from pipeline.core import resources

    monkeypatch.setattr(resources, "free_disk_bytes", lambda path: 100 << 20)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", never_load)
    err = refused(["convert", "--model", str(tiny_ckpt), "--quant", "fp16", "--device", "cpu"], capsys)
    assert "Not enough disk for the fp16 checkpoint of" in err and "0.10 GiB is free" in err
    assert "PIPELINE_BUILD_DIR" in err
    assert not any(build_root.rglob("checkpoints/*"))


def test_a_hub_model_too_big_is_refused_from_its_config_before_the_download(
    online: Path, build_root: Path, monkeypatch, capsys
) -> None:
    from pipeline.core import resources

    big = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b" / "config.json").read_text())
    big |= {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64}
    files = {"config.json": json.dumps(big).encode(), "model.safetensors": b"\0" * 64}
    monkeypatch.setattr(resources, "machine", lambda: NO_GPU)
    with FakeHub("big-org/Big-70B", files) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        err = refused(["convert", "--model", "hf:big-org/Big-70B", "--quant", "fp16"], capsys)
    assert "hf:big-org/Big-70B does not fit in host RAM" in err and "70.55B parameters" in err
    assert hub.fetched() == {"config.json"}  # the weights were never fetched
    assert not build_root.exists()

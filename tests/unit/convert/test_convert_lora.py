"""`pipeline convert --lora`: adapters numbered from 1 (digits keep theirs, 0 never), checked against the model
before any work, converted into <checkpoint>/lora/<task_id>/ in the checkpoint's dtype, name -> task id in the
manifest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lora_cases import ATTENTION, MLP, make_adapter, tiny_llama


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert-lora")
    base = tiny_llama(root / "base")
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(96)}  # convert loads the tokenizer with the model
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t2")), unk_token="t2",
                            pad_token="t0", eos_token="t1").save_pretrained(base)
    other = tiny_llama(root / "other", hidden=128)
    return base, {"sql": make_adapter(base, root / "sql", rank=8, targets=ATTENTION),
                  "chat": make_adapter(base, root / "chat", rank=16, targets=ATTENTION + MLP, seed=2),
                  "wide": make_adapter(other, root / "wide", rank=4, targets=ATTENTION)}


def test_task_ids_start_at_1_keep_digits_and_refuse_0(tmp_path):
    from pipeline.convert.lora_set import parse_adapters
    from pipeline.core.errors import InvalidInputError

    refs = parse_adapters(["a=x", "2=y", "b=z", str(tmp_path / "folder-name")])
    assert [(r.name, r.task_id) for r in refs] == [("a", 1), ("2", 2), ("b", 3), ("folder-name", 4)]
    for bad, needle in ((["0=x"], "task id 0"), (["a=x", "a=y"], "more than once"), (["base=x"], "base")):
        with pytest.raises(InvalidInputError, match=needle):
            parse_adapters(bad)


@pytest.mark.slow  # ModelOpt exports the tiny model
def test_convert_writes_the_adapters_in_the_checkpoints_dtype(world, tmp_path, monkeypatch):
    from pipeline.convert import ConvertSpec, convert

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    base, adapters = world
    result = convert(ConvertSpec(model=str(base), quant="fp16", device="cpu",
                                 lora=(f"sql={adapters['sql']}", f"chat={adapters['chat']}")))
    lora = result.path / "lora"
    assert sorted(p.name for p in lora.iterdir()) == ["1", "2"]
    weights = np.load(lora / "2" / "model.lora_weights.npy")
    config = np.load(lora / "2" / "model.lora_config.npy")
    assert weights.dtype == np.float16 and weights.shape[:2] == config.shape[:2] and config.shape[2] == 3
    assert set(config[0, :, 2]) == {16}
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["lora"]["task_ids"] == {"sql": 1, "chat": 2} and manifest["lora"]["dtype"] == "float16"
    plain = convert(ConvertSpec(model=str(base), quant="fp16", device="cpu"))
    assert plain.ckpt_id != result.ckpt_id and not (plain.path / "lora").exists()


def test_convert_refuses_an_adapter_for_another_model_before_any_work(world, tmp_path, monkeypatch, capsys):
    from pipeline.cli import run

    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    base, adapters = world
    assert run(["convert", "--model", str(base), "--lora", f"wide={adapters['wide']}"]) == 2
    err = capsys.readouterr().err
    assert "wide" in err and "hidden size 128" in err and "Traceback" not in err
    assert not list((tmp_path / "build").rglob("checkpoints/*"))
    assert run(["convert", "--model", str(base), "--format", "hf", "--lora", str(adapters["sql"])]) == 2
    assert "PEFT folders" in capsys.readouterr().err

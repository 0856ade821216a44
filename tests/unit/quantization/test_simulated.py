"""pipeline.quantization.simulated: what simulated_model hands quantize_model, what greedy_speed times (stubs, no model),
and that load_reference_model quantizes the weights once (a tiny real checkpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeline.quantization.modelopt
from pipeline.quantization.modelopt import CalibrationRun
from pipeline.quantization.simulated import SpeedRun, Variant, greedy_speed, simulated_model


@pytest.fixture
def quantize_calls(monkeypatch) -> list[CalibrationRun]:
    """Stub load_hf_model/quantize_model/round_weights*: record the CalibrationRun quantize_model gets."""
    import pipeline.quantization.simulated

    calls: list[CalibrationRun] = []

    def quantize_model(model, tokenizer, fmt, kv, calibration=CalibrationRun()):
        calls.append(calibration)
        return model

    monkeypatch.setattr(pipeline.quantization.modelopt, "load_hf_model", lambda hf_dir, dtype, placement=None: ("model", "tok"))
    monkeypatch.setattr(pipeline.quantization.modelopt, "quantize_model", quantize_model)
    monkeypatch.setattr(pipeline.quantization.simulated, "round_weights", lambda model, dtype: model)
    monkeypatch.setattr(pipeline.quantization.simulated, "round_weights_per_channel", lambda model, bits: model)
    return calls


def test_simulated_model_calibrates_on_the_texts_only_where_the_format_needs_them(quantize_calls) -> None:
    progress = lambda done, total: None  # noqa: E731
    calibration = CalibrationRun(texts=("a", "b"), batch_size=2, max_len=16, progress=progress)
    assert simulated_model(Path("hf"), Variant(quant="fp8"), calibration) == ("model", "tok")
    assert quantize_calls[-1] == calibration
    simulated_model(Path("hf"), Variant(quant="int8_wo"), calibration)  # weight-only int8: no calibration data
    assert quantize_calls[-1] == CalibrationRun(texts=(), batch_size=2, max_len=16, progress=progress)
    simulated_model(Path("hf"), Variant(quant="fp16", kv_cache="fp8"), calibration)  # a quantized KV cache calibrates
    assert quantize_calls[-1] == calibration
    simulated_model(Path("hf"), Variant(quant="fp16"), calibration)  # 16-bit, no quantizer: rounding only
    assert len(quantize_calls) == 3


def test_greedy_speed_times_exactly_new_tokens_repeats_times_after_one_warm_up() -> None:
    import torch

    prompts, generated = [], []

    class Tokenizer:
        pad_token_id = 0

        def __call__(self, text, return_tensors):
            prompts.append(text)
            return {"input_ids": torch.zeros((1, 5), dtype=torch.long)}

    class Model:
        def generate(self, input_ids, **kwargs):
            generated.append((kwargs["max_new_tokens"], kwargs["min_new_tokens"], kwargs["do_sample"]))

    result = greedy_speed(Model(), Tokenizer(), SpeedRun(new_tokens=8, repeats=2, prompt="hi"), name="fp16", load_s=1.234)
    assert prompts == ["hi"]
    assert generated == [(4, 4, False), (8, 8, False), (8, 8, False)]
    assert result.name == "fp16" and result.new_tokens == 8 and result.prompt_tokens == 5 and result.load_s == 1.23
    assert len(result.runs) == 2 and result.tokens_per_s > 0
    default = greedy_speed(Model(), Tokenizer(), name="x")
    assert default.new_tokens == 32 and len(default.runs) == 3 and prompts[-1] == SpeedRun().prompt


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["fp8", "int8_sq"])
def test_reference_model_weights_are_quantized_once_not_at_every_forward(tiny_ckpt: Path, quant: str) -> None:
    """load_reference_model folds each weight quantizer into its weight: the weights hold what the quantizer
    gives (the unfolded model's), the weight quantizers are off, the activation quantizers stay on, and the
    logits are the unfolded model's, bit for bit. Unfolded, every forward call fake-quantized the whole model again."""
    import torch

    from pipeline.quantization.modelopt import _quantized_linears
    from pipeline.quantization.simulated import load_reference_model

    texts = ["w1 w2 w3 w4 w5 w6", "w7 w8 w9 w10"]
    torch.manual_seed(0)
    unfolded, _ = simulated_model(tiny_ckpt, Variant(quant=quant), CalibrationRun(texts=tuple(texts), max_len=256))
    torch.manual_seed(0)
    folded, _ = load_reference_model(tiny_ckpt, quant, calib_texts=texts)
    pairs = list(zip(_quantized_linears(unfolded), _quantized_linears(folded)))
    assert pairs
    with torch.no_grad():
        for (name, before), (_, after) in pairs:
            assert before.weight_quantizer.is_enabled and not after.weight_quantizer.is_enabled, name
            assert after.input_quantizer.is_enabled, name
            assert torch.equal(after.weight, before.weight_quantizer(before.weight)), name
            assert after.weight.data_ptr() % 64 == 0, name  # storage of its own, aligned as the quantizer's output was
        ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
        assert torch.equal(folded(ids).logits, unfolded(ids).logits)

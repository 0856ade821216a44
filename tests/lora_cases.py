"""LoRA adapters made by PEFT for the tests: random weights with a nonzero B (a fresh PEFT adapter has B = 0,
which would change nothing), saved with PEFT's own save_pretrained; and PEFT's own greedy output to compare with."""

from __future__ import annotations

from pathlib import Path

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def tiny_llama(folder: Path, *, layers: int = 2, hidden: int = 64, seed: int = 0) -> Path:
    """A small Llama checkpoint with random weights (float32), saved as an HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, eos_token_id=1,
                         bos_token_id=0, pad_token_id=0, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def make_adapter(base: Path, folder: Path, *, rank: int, targets: tuple[str, ...], alpha: float | None = None,
                 rslora: bool = False, seed: int = 1, scale: float = 0.05) -> Path:
    """A PEFT LoRA adapter for the model at `base`, with random A and B (std `scale`), saved by PEFT."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, target_modules=list(targets),
                        lora_dropout=0.0, use_rslora=rslora, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    peft_model.save_pretrained(folder)
    return folder


def peft_greedy(base: Path, adapter: Path | None, prompt_ids: list[int], max_new_tokens: int):
    """PEFT's own greedy output for `adapter` (None: the base model): (token ids, log-probs of each, from the raw
    logits). It stops at the model's end id, as the served request does."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    tokens = out.sequences[0, len(prompt_ids):].tolist()
    logprobs = [float(torch.log_softmax(score[0].float(), dim=-1)[token]) for score, token in zip(out.logits, tokens)]
    return tokens, logprobs

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


def bench_lora_mix(url: str, source: Path, out: Path, capsys) -> dict:
    """`pipeline bench --lora-mix sql=0.25,chat=0.25,base=0.5` (8 requests, concurrency 2) at `url`: each class
    completed every request it was given, sql has its ratio to base; returns bench.json's first level."""
    import json

    from pipeline import cli

    code = cli.run(["bench", "--url", url, "--concurrency", "2", "--requests", "8", "--warmup", "1",
                    "--isl", "16", "--osl", "8", "--lora-mix", "sql=0.25,chat=0.25,base=0.5", "--lora-source", str(source),
                    "--out", str(out), "--json"])
    output = capsys.readouterr().out
    assert code == 0, output[-2000:]
    level = json.loads(next(Path(out).rglob("bench.json")).read_text())["levels"][0]
    adapters = level["adapters"]
    assert {k: v["requests"] for k, v in adapters.items()} == {"sql": 2, "chat": 2, "base": 4}
    assert all(v["completed"] == v["requests"] for v in adapters.values())
    assert adapters["sql"]["vs_base"]["ttft_p50"] is not None
    return level


def smoke_lora(url: str, *options: str, capsys) -> dict:
    """`pipeline smoke --url URL --lora-task-id 1 OPTIONS... --json` passes, its lora check with it: the adapter's
    answer differs from base and base is unchanged afterwards; returns the checks by name."""
    import json

    from pipeline import cli

    code = cli.run(["smoke", "--url", url, "--lora-task-id", "1", *options, "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 0, [c for c in checks.values() if not c["passed"]]
    assert checks["lora"]["passed"] and "differs from base" in checks["lora"]["detail"]
    assert "unchanged" in checks["lora"]["detail"]
    return checks

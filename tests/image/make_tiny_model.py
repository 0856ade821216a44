"""A tiny random Llama with a word-level tokenizer, saved by transformers as a Hugging Face folder:
the local model the image test builds engines from (no hub download inside the image).

    python make_tiny_model.py OUT_DIR
"""

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = ("the capital of france is paris what answer one two three four five six seven eight nine ten "
         "hello world a an and or not yes no it this that to in on at by for with from up down").split()


def main(out: Path) -> None:
    vocab = {word: i for i, word in enumerate(WORDS)}
    vocab |= {"<unk>": len(vocab), "<s>": len(vocab) + 1, "</s>": len(vocab) + 2}
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(out)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="</s>").save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

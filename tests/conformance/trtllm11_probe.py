"""Run by the transformers 4.57.1 + ModelOpt 0.37 environment (scripts/trtllm11_venv.sh), not by
pytest: it must not import the pipeline (which needs transformers 5). Prints one JSON object.

    python trtllm11_probe.py read HF_DIR TEXTS_JSON     config and tokenizer as transformers 4.57.1 reads them
    python trtllm11_probe.py export HF_DIR OUT_DIR N     ModelOpt 0.37 fp8 TensorRT-LLM export of the first N layers
    python trtllm11_probe.py load HF_DIR KWARGS_JSON      from_pretrained(HF_DIR, **kwargs) as convert calls it
                                                         ("dtype" given by name); the dtype and device map it got
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path


def read(hf_dir: str, texts_file: str) -> dict:
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    chat = tokenizer.apply_chat_template([{"role": "user", "content": texts[0]}], add_generation_prompt=True, tokenize=True)
    return {
        "transformers": transformers.__version__,
        "rope_theta": getattr(config, "rope_theta", None),
        "rope_scaling": getattr(config, "rope_scaling", None),
        "architectures": config.architectures,
        "torch_dtype": str(config.torch_dtype),  # what TensorRT-LLM's ModelConfig.torch_dtype reads
        "tokenizer_class": type(tokenizer).__name__,
        "ids": [tokenizer(text)["input_ids"] for text in texts],
        "chat_ids": list(chat),
        "eos_token": tokenizer.eos_token,
    }


def export(hf_dir: str, out_dir: str, layers: str) -> dict:
    import modelopt
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, num_hidden_layers=int(layers), torch_dtype=torch.float32).eval()
    batch = tokenizer(["The capital of France is", "def add(a, b): return a + b"], return_tensors="pt", padding=True)

    def forward_loop(m):
        with torch.no_grad():
            m(**batch)

    model = mtq.quantize(model, mtq.FP8_DEFAULT_CFG, forward_loop)
    with torch.inference_mode():
        export_tensorrt_llm_checkpoint(model, "llama", torch.float16, export_dir=out_dir, inference_tensor_parallel=1)
    config = json.loads((Path(out_dir) / "config.json").read_text(encoding="utf-8"))
    return {"modelopt": modelopt.__version__, "config": config}


def load(hf_dir: str, kwargs_json: str) -> dict:
    import accelerate
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    kwargs = json.loads(kwargs_json)
    kwargs["dtype"] = getattr(torch, kwargs["dtype"])
    model = AutoModelForCausalLM.from_pretrained(hf_dir, **kwargs)
    return {"transformers": transformers.__version__, "accelerate": accelerate.__version__,
            "dtype": str(next(model.parameters()).dtype), "hf_device_map": getattr(model, "hf_device_map", None),
            "devices": sorted({str(p.device) for p in model.parameters()})}


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    command, *args = sys.argv[1:]
    result = {"read": read, "export": export, "load": load}[command](*args)
    print(json.dumps(result))

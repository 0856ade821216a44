"""Stand-in trtllm-build: reads the flags the real one takes, writes what it writes (output_dir/config.json
with the checkpoint's pretrained_config and the build_config, one rank<N>.engine per rank), and reports
its interpreter. The engines are placeholders: only NVIDIA's tool on a GPU makes real ones."""

import argparse
import json
import os
import sys

from tensorrt_llm import __version__, environment_report

PLUGINS = ("gemm_plugin", "gpt_attention_plugin", "paged_kv_cache", "use_paged_context_fmha", "remove_input_padding",
           "context_fmha", "use_fp8_context_fmha", "tokens_per_block", "multiple_profiles", "reduce_fusion",
           "norm_quant_fusion", "user_buffer", "use_fused_mlp")


def main() -> int:
    parser = argparse.ArgumentParser(prog="trtllm-build")
    parser.add_argument("--checkpoint_dir", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--workers", type=int, default=1)
    for name in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_beam_width"):
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--kv_cache_type")
    for name in PLUGINS:
        parser.add_argument(f"--{name}")
    args, unknown = parser.parse_known_args()
    print(environment_report("trtllm-build (stand-in)"), flush=True)
    with open(os.path.join(args.checkpoint_dir, "config.json"), encoding="utf-8") as f:
        pretrained = json.load(f)
    world = int((pretrained.get("mapping") or {}).get("world_size", 1))
    values = vars(args)
    build_config = {name: values[name] for name in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens",
                                                     "max_beam_width") if values[name] is not None}
    plugins = {}
    for name in PLUGINS:
        value = values[name]
        if value is not None:
            plugins[name] = {"enable": True, "disable": False}.get(value, int(value) if value.isdigit() else value)
    build_config["plugin_config"] = plugins
    if args.kv_cache_type:
        build_config["kv_cache_type"] = args.kv_cache_type.upper()
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"version": __version__, "pretrained_config": pretrained, "build_config": build_config}, f, indent=2)
    for rank in range(world):
        with open(os.path.join(args.output_dir, f"rank{rank}.engine"), "wb") as f:
            f.write(b"stand-in engine: not loadable\n")
    if unknown:
        print(f"[TRT-LLM] [W] stand-in ignored: {' '.join(unknown)}", flush=True)
    print(f"[TRT-LLM] [I] Total time of building all engines: 00:00:00 ({world} rank(s))", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Stand-in trtllm-serve: reports its interpreter, then stops the way the real one does where no GPU is
(non-zero exit before the server is ready). Only NVIDIA's tool on a GPU serves."""

import sys

from tensorrt_llm import environment_report


def main() -> int:
    print(environment_report("trtllm-serve (stand-in)"), flush=True)
    print(f"trtllm-serve (stand-in): {' '.join(sys.argv[1:])}", flush=True)
    print("RuntimeError: stand-in TensorRT-LLM: no CUDA device (the LLM API needs an NVIDIA GPU)", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""The one place where the TensorRT-LLM release and the Triton image that carries it are pinned.

Why this pairing: NVIDIA removed `trtllm-build` and the Triton C++ `tensorrtllm` backend after the
1.2 line, so the pipeline needs a release that still has both. The newest published Triton image
with them is 25.12 (TensorRT-LLM 1.1.0, TensorRT 10.13). Engines only load under the TensorRT /
TensorRT-LLM version that built them, so engines are built and served in this same image.
"""

from __future__ import annotations

TRTLLM_VERSION = "1.1.0"
TENSORRT_VERSION = "10.13"
TRITON_RELEASE = "25.12"
TRITON_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-trtllm-python-py3"

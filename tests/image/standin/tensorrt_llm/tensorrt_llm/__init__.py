"""Stand-in tensorrt_llm 1.1.0 (image test only): version and tools, no GPU runtime."""

import sys

__version__ = "1.1.0"


def environment_report(who: str) -> str:
    """The line every stand-in process prints: which Python prefix and which transformers it runs under."""
    try:
        import transformers

        version = transformers.__version__
    except ImportError:
        version = "none"
    return f"{who}: python prefix {sys.prefix}, transformers {version}"


def __getattr__(name: str):
    raise AttributeError(
        f"tensorrt_llm.{name} is not available: this is the image test's stand-in for TensorRT-LLM 1.1.0, "
        "which has no runtime (LLM, SamplingParams, ...) without an NVIDIA GPU")

"""TensorRT-LLM compile-and-deploy pipeline: checkpoint -> engine -> Triton repository -> gates."""

__version__ = "0.1.0"

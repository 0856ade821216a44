"""The reference runtime: the `tensorrt_llm` Triton model on the CPU.

Imported by the Python-backend model the render stage writes for `--runtime reference`
(model_repo_templates/tensorrt_llm/1/model_reference.py). Batching, scheduling and the paged KV
cache are transformers' continuous batching manager; this package adds the per-request sampling
options of the TensorRT-LLM tensor contract (see sampling.py) and the request bookkeeping
(engine.py).
"""

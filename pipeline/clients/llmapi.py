"""Serving a Triton LLM-API repository (pipeline/render/llmapi.py): recognise one, and warm it up through its
own contract before `pipeline serve` reports ready. The requests go through the one Triton client
(pipeline.clients.triton.generate with `llmapi`: build_llmapi_inputs, collect_llmapi_response).

The answer follows upstream's semantics (pipeline/data/llmapi/contract.json): in streaming mode every
response's `text_output` is the text so far, so the last one holds the whole completion.
"""

from __future__ import annotations

from pathlib import Path

MODEL = "tensorrt_llm"
# llmapi_repo renders the model without a batch dimension (max_batch_size 0, as upstream's model.yaml): [1] tensors
LLMAPI_OPTIONS = {"batched": False}


def is_llmapi_repo(repo: Path) -> bool:
    """A repository whose tensorrt_llm model is NVIDIA's LLM-API model (a model.yaml beside its model.py)."""
    return (Path(repo) / MODEL / "1" / "model.yaml").is_file()


def warm_up(grpc_url: str, decoupled: bool, *, requests: int = 2, max_tokens: int = 4, timeout_s: float = 120.0) -> str:
    """A few short requests through the LLM-API contract (streamed when the model is decoupled); a failure or a
    missing finish_reason is a StageFailedError: a server that cannot answer is not ready."""
    from pipeline.clients.triton import GenerateRequest, generate
    from pipeline.core.errors import StageFailedError

    request = GenerateRequest(prompt="Hello, warm-up.", max_tokens=max_tokens, stream=decoupled)
    for _ in range(requests):
        answer = generate(grpc_url, MODEL, request, timeout_s=timeout_s, llmapi=LLMAPI_OPTIONS)
        if answer.error is not None or answer.finish_reason is None:
            raise StageFailedError(f"Warm-up request to the LLM-API model {MODEL!r} failed: "
                                   f"{answer.error or 'its last response carried no finish_reason'}",
                                   hint="See the server log (`pipeline serve --log-file`).")
    return MODEL

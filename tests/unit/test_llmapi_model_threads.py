"""The LLM-API model (model_repo_templates/llmapi/tensorrt_llm/1/model.py) talks to its response senders from one
thread only, and asks running requests for cancellation on a period rather than when an output arrives.

Why: ResponseSender.send waits for the Triton process (python_backend r25.12 src/response_sender.cc:180-183);
sent from TensorRT-LLM's asyncio loop or the reference runtime's dispatcher, it holds up every request. NVIDIA's
model (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py @b35ac1b6) sends from a response
thread and polls is_cancelled() from a loop of its own, so a request without streaming, which has no output
until it ends, is aborted too. The GPU branch cannot run here; what can be read is where the calls are."""

from __future__ import annotations

import ast
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "model_repo_templates" / "llmapi" / "tensorrt_llm" / "1" / "model.py"


def _calls_by_owner(attribute: str) -> set[str]:
    """'Class.method' (or 'function') of every call of `.attribute(...)` in the template."""
    tree = ast.parse(TEMPLATE.read_text(encoding="utf-8"))
    owners = set()

    def visit(node, owner):
        for child in ast.iter_child_nodes(node):
            name = owner
            if isinstance(child, ast.ClassDef):
                name = child.name
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and "." not in owner:
                name = f"{owner}.{child.name}" if owner else child.name
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == attribute:
                owners.add(owner)
            visit(child, name)

    visit(tree, "")
    return owners


def test_only_the_responder_thread_sends() -> None:
    # _CountedSender.send is the in-flight gauge's wrapper around the real sender: only the responder calls it
    assert _calls_by_owner("send") == {"_Responder._send", "_Responder._poll", "_CountedSender.send"}


def test_cancellation_is_asked_on_the_responder_thread_not_in_the_engines() -> None:
    # _Call.is_cancelled is what the responder's poll calls; neither engine polls when an output arrives
    assert _calls_by_owner("is_cancelled") == {"_Responder._poll"}
    source = TEMPLATE.read_text(encoding="utf-8")
    assert "is_cancelled=" not in source  # the reference engine gets no probe of its own

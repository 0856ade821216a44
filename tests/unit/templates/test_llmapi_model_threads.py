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

from llmapi_helpers import load_llmapi_template

TEMPLATE = Path(__file__).resolve().parents[3] / "model_repo_templates" / "llmapi" / "tensorrt_llm" / "1" / "model.py"


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


def _load_template(monkeypatch):
    return load_llmapi_template(monkeypatch, TEMPLATE)


class _Output:
    def __init__(self):
        import types

        self.finished = True
        self.outputs = [types.SimpleNamespace(text="x", finish_reason="length", stop_reason=None,
                                              cumulative_logprob=None)]


class _Generation:
    """What LLM.generate_async returns, as far as the model uses it: async iteration and abort()."""

    def __init__(self, gate):
        self.gate, self.aborted = gate, False

    def abort(self):
        self.aborted = True

    def __aiter__(self):
        return self._outputs()

    async def _outputs(self):
        yield _Output()


def _llmapi_engine(monkeypatch, template):
    """The GPU branch's engine over a stand-in for tensorrt_llm's LLM (not installable here): what is under test
    is the model's own bookkeeping of handles, not TensorRT-LLM."""
    import sys
    import types

    generations = []

    class LLM:
        def __init__(self, **kwargs):
            pass

        def generate_async(self, prompt, params, streaming):
            generations.append(_Generation(None))
            return generations[-1]

        def shutdown(self):
            pass

    llm_utils = types.SimpleNamespace(update_llm_args_with_extra_dict=lambda args, extra: {})
    monkeypatch.setitem(sys.modules, "tensorrt_llm", types.SimpleNamespace(LLM=LLM, SamplingParams=dict))
    monkeypatch.setitem(sys.modules, "tensorrt_llm.llmapi", types.SimpleNamespace(llm_utils=llm_utils))
    monkeypatch.setitem(sys.modules, "tensorrt_llm.llmapi.llm_utils", llm_utils)
    return template._LlmApiEngine({"model": "m"}), generations


def _drain(engine):
    import asyncio

    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), engine.loop).result(timeout=5)


def test_an_abort_that_arrives_after_the_request_ended_leaves_nothing_behind(monkeypatch) -> None:
    """The responder polls a request until its final response is sent, so an abort can reach the engine after
    the generation ended; it must not stay in `aborted` (one handle per such request, for the model's life)."""
    import threading

    import numpy as np

    template = _load_template(monkeypatch)
    engine, _ = _llmapi_engine(monkeypatch, template)
    job = template.Job({"text_input": np.array([b"hi"], dtype=np.object_)}.get)
    ended = threading.Event()
    handle = engine.submit(job, lambda update: update.finished and ended.set(), lambda message: None)
    assert ended.wait(5)
    _drain(engine)
    engine.abort(handle)
    _drain(engine)
    assert engine.aborted == set() and engine.handles == {}
    engine.close()


def test_an_abort_before_generation_starts_still_aborts_it(monkeypatch) -> None:
    import threading

    import numpy as np

    template = _load_template(monkeypatch)
    engine, generations = _llmapi_engine(monkeypatch, template)
    job = template.Job({"text_input": np.array([b"hi"], dtype=np.object_)}.get)
    gate = threading.Event()
    engine.loop.call_soon_threadsafe(gate.wait, 5)  # hold the loop: _run cannot start yet
    handle = engine.submit(job, lambda update: None, lambda message: None)
    engine.abort(handle)
    gate.set()
    _drain(engine)
    _drain(engine)
    assert generations and generations[0].aborted
    assert engine.aborted == set()
    engine.close()


def test_a_request_whose_final_response_went_out_is_not_tracked(monkeypatch) -> None:
    """The race of a request that ends between submit and track: the responder marks it closed under its lock
    when the final response goes out, and track() skips a closed call, so no stale call is polled."""
    import sys
    import threading
    import types

    template = _load_template(monkeypatch)
    sent = []
    pb = sys.modules["triton_python_backend_utils"]
    monkeypatch.setattr(pb, "TRITONSERVER_RESPONSE_COMPLETE_FINAL", 1, raising=False)
    responder = template._Responder(abort=lambda handle: None, period_s=60)
    sender = types.SimpleNamespace(send=lambda response, flags=0: sent.append(flags))
    request = types.SimpleNamespace(request_id=lambda: "r1")
    call = template._Call(request, sender)
    done = threading.Event()
    responder.put(call, "final", True)
    responder.queue.put((types.SimpleNamespace(closed=False, sender=types.SimpleNamespace(
        send=lambda response, flags=0: done.set())), "marker", False))
    assert done.wait(5) and sent == [1]
    responder.track(call)
    assert responder.calls_of("r1") == []
    responder.close()

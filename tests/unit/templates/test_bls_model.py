"""The BLS model's own thread pool (model_repo_templates/tensorrt_llm_bls/1/model.py): bounded, and a request
still waiting for a thread when the model unloads is answered, with an UNAVAILABLE error, not dropped (the
pool's cancel_futures used to cancel it, so its client never got a final response).

What stands in for the stub's triton_python_backend_utils is only what these paths call (a response, an error,
the final flag, the logger); the request path itself runs against a real tritonserver in the integration
tests."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import types
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[3] / "model_repo_templates"
BLS = TEMPLATES / "tensorrt_llm_bls" / "1" / "model.py"


class _Error:
    UNAVAILABLE = "UNAVAILABLE"

    def __init__(self, message, code=None):
        self.message, self.code = message, code


class _Response:
    def __init__(self, output_tensors=None, error=None):
        self.error = error


@pytest.fixture()
def bls(monkeypatch):
    pb = types.SimpleNamespace(TritonError=_Error, InferenceResponse=_Response, TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
                               Logger=types.SimpleNamespace(log_info=lambda message: None),
                               using_decoupled_model_transaction_policy=lambda config: True)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    monkeypatch.syspath_prepend(str(TEMPLATES))
    spec = importlib.util.spec_from_file_location("bls_model_under_test", BLS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(bls, concurrency):
    model = bls.TritonPythonModel()
    parameters = {"bls_concurrency": {"string_value": str(concurrency)}}
    model.initialize({"model_config": json.dumps({"parameters": parameters})})
    return model


def test_the_pool_is_bounded_whatever_the_batch_size(bls) -> None:
    model = _model(bls, 1536)
    assert model.workers._max_workers == bls.MAX_WORKERS <= 128
    model.finalize()
    assert _model(bls, 3).workers._max_workers == 3


def test_requests_queued_at_unload_get_a_final_response(bls) -> None:
    model = _model(bls, 1)
    release, started = threading.Event(), threading.Event()
    answered = []

    def serve(request, sender):  # the one worker is busy with a request that runs until released
        started.set()
        release.wait(5)
        return _Response()

    model._serve = serve

    class Sender:
        def __init__(self, name):
            self.name = name

        def send(self, response=None, flags=0):
            answered.append((self.name, flags, response.error.code if response and response.error else None))

    model.execute([types.SimpleNamespace(get_response_sender=lambda n=n: Sender(n)) for n in range(4)])
    assert started.wait(5)
    unload = threading.Thread(target=model.finalize)
    unload.start()
    while unload.is_alive() and not getattr(model, "closing", False):  # unloading has begun
        unload.join(0.01)
    release.set()
    unload.join(10)
    assert not unload.is_alive()
    assert sorted(answered) == [(0, 1, None), (1, 1, "UNAVAILABLE"), (2, 1, "UNAVAILABLE"), (3, 1, "UNAVAILABLE")]

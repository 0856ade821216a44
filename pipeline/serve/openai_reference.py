"""The CPU's own OpenAI-compatible server over the reference runtime, for a CPU deployable that carries LoRA
adapters: `pipeline serve --api openai DEPLOYABLE` runs `python -m pipeline.serve.openai_reference DEPLOYABLE`
(pipeline/serve/openai.py starts it like `transformers serve`: own process group, ready check, log file, stop).

Why not `transformers serve`: it ignores trtllm-serve's per-request `lora_request` and keeps one model per
process, so adapters cannot mix in one batch. Here one ReferenceEngine (pipeline.reference_runtime) serves every
request in-process, with LoRA per request (lora_apply.py), so the client code that talks to trtllm-serve works
unchanged: GET /health, GET /v1/models, POST /v1/completions and /v1/chat/completions, whole or streamed (SSE,
`data: [DONE]` at the end, usage with stream_options.include_usage), and `lora_request` in the body
(openai_requests.py: what it takes and where the facts come from).

An adapter is read from its PEFT folder (lora_path on this server, or the deployable's lora/<name>/ by name),
converted to TensorRT-LLM's tensors (pipeline.convert.lora) once per lora_int_id, and kept in the runtime's host
cache under that id (lora.py: NVIDIA's cache semantics); an evicted one is converted again. One lora_int_id names
one folder for the server's lifetime. Bad requests and bad adapters answer 400 with an OpenAI-style error body.
Built on the standard library's http.server (a thread per connection; chunked transfer for streams).
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import signal
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

from pipeline.core.deployable import Deployable
from pipeline.serve.openai_requests import (FINISH_REASONS, Answer, ApiError, ApiRequest, Endpoint, LoraChoice,
                                            parse_request, resolve_lora_path, streamable)

LOG = logging.getLogger("pipeline.serve.openai_reference")
PATHS: dict[str, Endpoint] = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}


def reference_command(deployable: Deployable, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "pipeline.serve.openai_reference", str(deployable.path), "--host", host,
            "--port", str(port)]


def deployable_adapters(deployable: Deployable) -> dict[str, tuple[int, str]]:
    """name -> (task id, PEFT folder) of the adapters the deployable carries (its manifest's "lora"; lora/<name>/)."""
    from pipeline.convert.lora_set import LORA_SUBDIR

    names = ((deployable.manifest.get("lora") or {}).get("task_ids") or {})
    return {str(name): (int(task), str(deployable.path / LORA_SUBDIR / str(name))) for name, task in names.items()}


@dataclass(frozen=True)
class Update:
    """Text so far (what may be sent), and at the end the finish reason and token counts."""

    text: str
    finished: bool = False
    finish_reason: str | None = None
    completion_tokens: int = 0


class ReferenceHost:
    """The deployable's model on the reference runtime, its tokenizer, and the adapters by lora_int_id."""

    def __init__(self, deployable: Deployable) -> None:
        from transformers import AutoConfig, AutoTokenizer

        from pipeline.reference_runtime.engine import ReferenceEngine
        from pipeline.reference_runtime.lora import DEFAULT_MAX_RANK
        from pipeline.reference_runtime.lora_apply import LoraSettings
        from pipeline.reference_runtime.settings import limits_from_llm_options

        options, model_dir = deployable.options, deployable.model_dir
        self.limits, honoured, ignored = limits_from_llm_options({**options, "model": str(model_dir)}, {})
        LOG.info("reference runtime honours %s; ignores %s", ", ".join(honoured), ", ".join(ignored) or "nothing")
        lora = options.get("lora_config") or {}
        settings = LoraSettings(dtype="float32", max_rank=int(lora.get("max_lora_rank") or DEFAULT_MAX_RANK),
                                target_modules=tuple(lora.get("lora_target_modules") or ()))
        self.engine = ReferenceEngine(model_dir, self.limits, simulated_quant=deployable.simulated or ("fp16", "auto"),
                                      lora=settings)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
        self.tokenizer_lock = threading.Lock()  # a fast tokenizer is one Rust object: one thread at a time
        config = AutoConfig.from_pretrained(str(model_dir), trust_remote_code=False)
        text = getattr(config, "text_config", None) or config
        self.shape = (int(text.hidden_size), int(text.num_hidden_layers), settings.max_rank, settings.target_modules)
        self.model = str(model_dir)
        self.adapters = deployable_adapters(deployable)
        self._paths: dict[int, Path] = {}  # lora_int_id -> the folder it was loaded from
        self._lock = threading.Lock()
        LOG.info("serving %s; the deployable's adapters: %s", self.model,
                 ", ".join(f"{name} (id {task})" for name, (task, _) in sorted(self.adapters.items())) or "none")

    # -- LoRA ----------------------------------------------------------------------------------------
    def lora(self, choice: LoraChoice | None, *, reload: bool = False):
        """The engine's LoraRequest for a request's adapter (the id alone: the weights go into the cache here)."""
        from pipeline.reference_runtime.lora import LoraRequest

        if choice is None:
            return None
        path = resolve_lora_path(choice, self.adapters)
        with self._lock:
            known = self._paths.get(choice.task_id)
            if known is not None and known != path:
                raise ApiError(f"lora_request.lora_int_id {choice.task_id} already names the adapter {known} on this "
                               f"server, not {path}. Give each adapter its own lora_int_id.",
                               param="lora_request.lora_int_id")
            if reload or known is None or choice.task_id not in self.engine.lora.cache.task_ids():
                self._load(choice, path)
                self._paths[choice.task_id] = path
        return LoraRequest(choice.task_id)

    def _load(self, choice: LoraChoice, path: Path) -> None:
        from pipeline.convert.lora import LoraTarget, load_peft_adapter, to_trtllm_lora
        from pipeline.core.errors import PipelineError
        from pipeline.reference_runtime.lora import parse_adapter
        from pipeline.reference_runtime.requests import RequestError

        hidden, layers, max_rank, modules = self.shape
        layout = self.engine.lora.layout
        try:
            converted = to_trtllm_lora(load_peft_adapter(path), layout.dtype,
                                       LoraTarget(hidden, layers, max_rank, modules or None))
            self.engine.lora.cache.put(parse_adapter(choice.task_id, converted.weights, converted.config, layout))
        except (PipelineError, RequestError) as error:
            raise ApiError(f"lora_request {choice.name!r}: {error}", param="lora_request") from None
        LOG.info("LoRA: adapter %s (lora_int_id %d) converted from %s", choice.name, choice.task_id, path)

    # -- requests ------------------------------------------------------------------------------------
    def prompt_ids(self, request: ApiRequest) -> list[int]:
        if request.prompt_ids is not None:
            return list(request.prompt_ids)
        with self.tokenizer_lock:
            if request.endpoint == "completions":
                return list(self.tokenizer(request.prompt, add_special_tokens=True)["input_ids"])
            messages = [{**m, "content": _text_content(m.get("content"))} for m in request.messages]
            try:
                text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            except Exception as error:  # noqa: BLE001 - a template that refuses the messages
                raise ApiError(f"The model's chat template refused the messages: {error}", param="messages") from None
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        with self.tokenizer_lock:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def start(self, request: ApiRequest) -> "Job":
        """Submit a request (ApiError 400 when the runtime or the adapter refuses it); its updates follow."""
        from pipeline.reference_runtime.lora import NOT_CACHED
        from pipeline.reference_runtime.requests import GenerationRequest, RequestError
        from pipeline.reference_runtime.sampling import SamplingOptions

        ids = self.prompt_ids(request)
        # no max_tokens: up to the context, or the whole KV cache when it is smaller
        max_tokens = request.max_tokens or max(1, min(self.limits.max_seq_len, self.engine.kv_plan.tokens) - len(ids))
        sampling = SamplingOptions(temperature=request.temperature, top_k=request.top_k,
                                   top_p=0.0 if request.temperature == 0 else request.top_p, seed=request.seed,
                                   min_tokens=request.min_tokens)
        job = Job(self, request, ids)
        for attempt in range(2):  # an adapter evicted between its load and its request is loaded again, once
            generation = GenerationRequest(input_ids=ids, max_new_tokens=max_tokens, sampling=sampling, streaming=True,
                                           lora=self.lora(request.lora, reload=attempt > 0))
            try:
                job.engine_id = self.engine.submit(generation, job.events.put)
                return job
            except RequestError as error:
                if attempt or not str(error).startswith(NOT_CACHED.split("{")[0]):
                    raise ApiError(str(error)) from None
        raise AssertionError("unreachable")


def _text_content(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content)
    return "" if content is None else str(content)


class Job:
    """One submitted request: the engine's events turned into Updates (stop strings cut the text and end it)."""

    def __init__(self, host: ReferenceHost, request: ApiRequest, prompt_ids: list[int]) -> None:
        self.host, self.request, self.prompt_ids = host, request, prompt_ids
        self.events: queue.Queue = queue.Queue()
        self.engine_id: str | None = None

    def cancel(self) -> None:
        if self.engine_id is not None:
            self.host.engine.cancel(self.engine_id)

    def updates(self) -> Iterator[Update]:
        from pipeline.reference_runtime.completion import TextRules, completion

        request = self.request
        rules = TextRules(streaming=True, include_prompt=False, stop=request.stop)
        while True:
            event = self.events.get()
            if event.error:
                raise ApiError(f"The reference runtime failed the request: {event.error}", status=500)
            if not event.finished and not request.stream and not request.stop:
                continue  # nothing to send or look for before the end
            reason = FINISH_REASONS.get(event.finish_reason, event.finish_reason) if event.finished else None
            done = completion(self.host.decode, rules, self.prompt_ids, event.tokens, reason)
            if done.finished:
                if not event.finished:
                    self.cancel()  # a stop string: end it in the engine too
                yield Update(done.text, True, done.finish_reason or "stop", len(event.tokens))
                return
            yield Update(streamable(done.text, self.request.stop))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    host: ReferenceHost  # set on the subclass serve() makes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        LOG.info("%s %s", self.address_string(), format % args)

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?")[0].rstrip("/")
        if path == "/health":
            self._json(200, {"status": "ok"})
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.host.model, "object": "model", "created": 0,
                                                         "owned_by": "pipeline",
                                                         "max_model_len": self.host.limits.max_seq_len}]})
        else:
            self._json(404, ApiError(f"No route {path}.", status=404).body())

    def do_POST(self) -> None:  # noqa: N802
        endpoint = PATHS.get(self.path.split("?")[0].rstrip("/"))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if endpoint is None:
            self._json(404, ApiError(f"No route {self.path}.", status=404).body())
            return
        try:
            try:
                body = json.loads(raw or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise ApiError("The request body is not JSON.") from None
            request = parse_request(body, endpoint)
            job = self.host.start(request)
        except ApiError as error:
            self._json(error.status, error.body())
            return
        except Exception as error:  # noqa: BLE001 - answer 500, keep serving
            LOG.exception("request failed")
            self._json(500, ApiError(f"The server failed the request: {error}", status=500).body())
            return
        answer = Answer.new(str(body.get("model") or self.host.model), endpoint)
        if request.stream:
            self._stream(job, answer)
            return
        try:
            final = [u for u in job.updates() if u.finished][-1]
        except ApiError as error:
            self._json(error.status, error.body())
            return
        self._json(200, answer.whole(final.text, final.finish_reason or "stop", len(job.prompt_ids),
                                     final.completion_tokens))

    def _stream(self, job: Job, answer: Answer) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = ""
        try:
            self._event(answer.chunk(None, role=True) if answer.endpoint == "chat" else None)
            try:
                for update in job.updates():
                    delta = update.text[len(sent):] if update.text.startswith(sent) else ""
                    if delta or update.finished:
                        self._event(answer.chunk(delta, update.finish_reason if update.finished else None))
                        sent += delta
                    if update.finished:
                        if job.request.include_usage:
                            self._event(answer.usage_chunk(len(job.prompt_ids), update.completion_tokens))
                        break
            except ApiError as error:
                self._event(error.body())
            self._send_chunk(b"data: [DONE]\n\n")
            self._send_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            job.cancel()  # the client went away: free its batch slot and KV cache
            self.close_connection = True

    def _event(self, obj: dict | None) -> None:
        if obj is not None:
            self._send_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def serve(host: ReferenceHost, address: str, port: int) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"host": host})
    server = ThreadingHTTPServer((address, port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    from pipeline.core.deployable import read_deployable
    from pipeline.core.errors import PipelineError

    parser = argparse.ArgumentParser(prog="python -m pipeline.serve.openai_reference", description=__doc__.split("\n")[0])
    parser.add_argument("deployable", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        host = ReferenceHost(read_deployable(args.deployable))
    except PipelineError as error:
        LOG.error("%s", error)
        return 2
    try:
        server = serve(host, args.host, args.port)
    except OSError as error:
        LOG.error("cannot listen on %s:%d: %s (address already in use?)", args.host, args.port, error)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    LOG.info("OpenAI-compatible server on http://%s:%d/v1", args.host, server.server_address[1])
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        host.engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The OpenAI requests the CPU's own OpenAI server (pipeline/serve/openai_reference.py) takes, checked before any
work, and the JSON it answers with. Pure functions and frozen values: no model, no HTTP.

What it follows (facts with their sources):
  - trtllm-serve's per-request adapter is the body extension `"lora_request": {"lora_name", "lora_int_id",
    "lora_path"}`; `model` stays the base model's name and selects no adapter; `lora_path` is a path on the
    server's filesystem (TensorRT-LLM 1.1.0's example https://nvidia.github.io/TensorRT-LLM/1.1.0/examples/
    openai_completion_client_for_lora.html, source NVIDIA/TensorRT-LLM@48b7b5d8 lines 17-27; the fact sheet
    ../shared/reference/speculative_decoding_and_lora.md 5.6);
  - the server turns it into `LoRARequest(lora_name, lora_int_id, lora_path="", lora_ckpt_source="hf")`, which
    refuses a path that does not exist and a source other than hf/nemo (tensorrt_llm/executor/request.py, a
    1.1-period copy; the fact sheet 5.4). The reference runtime reads PEFT folders only (hf).
  - the request fields and their defaults as trtllm-serve's CompletionRequest has them (NVIDIA/TensorRT-LLM
    @54cf7be08a3582024dfa6791e8bb8b2034bfad67 tensorrt_llm/serve/openai_protocol.py, a later main copy, not pinned
    to 1.1.0): max_tokens None (up to the context), temperature and top_p 1.0 when unset, top_k 0, min_tokens 0,
    `lora_request: Optional[LoRARequest]`; `logprobs` and `suffix` refused.
Two choices of ours, as elsewhere in the project: lora_int_id 0 is refused (NVIDIA's clients read 0 as "no
LoRA"), and a request without lora_path names one of the deployable's own adapters by lora_name.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

Endpoint = Literal["chat", "completions"]
LORA_CKPT_SOURCES = ("hf", "nemo")


class ApiError(Exception):
    """A request refused with an HTTP status and an OpenAI-style error body."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.param = message, status, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True)
class LoraChoice:
    """A request's lora_request, checked: the name, the task id (lora_int_id), the folder (None: by name)."""

    name: str
    task_id: int
    path: str | None = None


@dataclass(frozen=True)
class ApiRequest:
    """One completion request as the server runs it."""

    endpoint: Endpoint
    prompt: str | None  # /v1/completions: the text; None when prompt_ids or messages are given
    prompt_ids: tuple[int, ...] | None
    messages: tuple[dict[str, Any], ...]  # /v1/chat/completions
    max_tokens: int | None  # None: up to the context
    stream: bool
    include_usage: bool
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    min_tokens: int  # trtllm-serve's extension (end ids masked until then)
    stop: tuple[str, ...]
    lora: LoraChoice | None


def _number(body: Mapping[str, Any], key: str, kind: type, default):
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise ApiError(f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}.", param=key)
    return kind(value)


def parse_lora(value: Any) -> LoraChoice | None:
    """The body's lora_request (None or absent: the base model)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError("lora_request must be an object {lora_name, lora_int_id, lora_path}.", param="lora_request")
    name, task, path = value.get("lora_name"), value.get("lora_int_id"), value.get("lora_path")
    if not isinstance(name, str) or not name:
        raise ApiError("lora_request.lora_name must be a non-empty string.", param="lora_request.lora_name")
    if isinstance(task, bool) or not isinstance(task, int):
        raise ApiError(f"lora_request.lora_int_id must be an integer, got {task!r}.", param="lora_request.lora_int_id")
    if task <= 0:
        raise ApiError(f"lora_request.lora_int_id {task}: adapter ids start at 1 (NVIDIA's clients read 0 as 'no "
                       "LoRA'). Send no lora_request for the base model.", param="lora_request.lora_int_id")
    if path is not None and (not isinstance(path, str) or not path):
        raise ApiError("lora_request.lora_path must be a non-empty string (a folder on the server).",
                       param="lora_request.lora_path")
    source = value.get("lora_ckpt_source", "hf")
    if source not in LORA_CKPT_SOURCES:
        raise ApiError(f"lora_request.lora_ckpt_source must be one of {', '.join(LORA_CKPT_SOURCES)}, got {source!r}.",
                       param="lora_request.lora_ckpt_source")
    if source != "hf":
        raise ApiError("lora_request.lora_ckpt_source nemo: the CPU's reference runtime reads Hugging Face PEFT "
                       "folders only.", param="lora_request.lora_ckpt_source")
    return LoraChoice(name, int(task), path)


def _prompt(body: Mapping[str, Any]) -> tuple[str | None, tuple[int, ...] | None]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # one prompt in a list: the same request
    if isinstance(prompt, str) and prompt:
        return prompt, None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return None, tuple(prompt)
    raise ApiError("prompt must be one non-empty string (or one list of token ids); this server takes one prompt "
                   "per request.", param="prompt")


def _messages(body: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list of {role, content}.", param="messages")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError("each message must be an object with a role and its content.", param="messages")
        content = message.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}]: text parts only
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise ApiError("message content parts must be text ({type: text, text}).", param="messages")
    return tuple(messages)


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    words = [stop] if isinstance(stop, str) else stop
    if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
        raise ApiError("stop must be a string or a list of non-empty strings.", param="stop")
    return tuple(words)


def parse_request(body: Any, endpoint: Endpoint) -> ApiRequest:
    """A request body -> ApiRequest, or ApiError (400) naming the field."""
    if not isinstance(body, dict):
        raise ApiError("The request body must be a JSON object.")
    if _number(body, "n", int, 1) != 1:
        raise ApiError("n must be 1: this server answers one choice per request.", param="n")
    refused = [key for key in ("echo", "logprobs", "suffix") if body.get(key)]
    if refused or body.get("best_of", 1) not in (None, 1):
        raise ApiError(f"{', '.join(refused) or 'best_of'}: not served by the CPU's reference OpenAI server.",
                       param=(refused or ["best_of"])[0])
    prompt, prompt_ids, messages = None, None, ()
    if endpoint == "chat":
        messages = _messages(body)
    else:
        prompt, prompt_ids = _prompt(body)
    max_tokens = _number(body, "max_tokens", int, _number(body, "max_completion_tokens", int, None))
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError("stream_options must be an object.", param="stream_options")
    temperature = _number(body, "temperature", float, 1.0)
    top_p = _number(body, "top_p", float, 1.0)
    min_tokens = _number(body, "min_tokens", int, 0)
    if min_tokens < 0:
        raise ApiError(f"min_tokens must be >= 0, got {min_tokens}.", param="min_tokens")
    if temperature < 0 or not 0 < top_p <= 1:
        raise ApiError("temperature must be >= 0 and top_p in (0, 1].", param="temperature" if temperature < 0 else "top_p")
    return ApiRequest(endpoint=endpoint, prompt=prompt, prompt_ids=prompt_ids, messages=messages, max_tokens=max_tokens,
                      stream=bool(body.get("stream")), include_usage=bool(options.get("include_usage")),
                      temperature=temperature, top_p=top_p, top_k=max(0, _number(body, "top_k", int, 0)),
                      seed=_number(body, "seed", int, None), min_tokens=min_tokens, stop=_stop(body),
                      lora=parse_lora(body.get("lora_request")))


def resolve_lora_path(choice: LoraChoice, adapters: Mapping[str, tuple[int, str]]) -> Path:
    """The PEFT folder of a request's adapter: its lora_path on this server's filesystem, or (no lora_path) the
    deployable's adapter of that lora_name, else of that lora_int_id (`adapters`: name -> (task id, folder), the
    manifest's "lora")."""
    if choice.path is None:
        by_id = [folder for task, folder in adapters.values() if task == choice.task_id]
        if choice.name not in adapters and not by_id:
            known = ", ".join(f"{name} (id {task})" for name, (task, _) in sorted(adapters.items())) or "none"
            raise ApiError(f"lora_request names adapter {choice.name!r} (lora_int_id {choice.task_id}) without a "
                           f"lora_path, and this deployable has no adapter of that name or id (it has: {known}). "
                           "Send lora_path, a PEFT adapter folder on the server.", param="lora_request.lora_name")
        return Path(adapters[choice.name][1] if choice.name in adapters else by_id[0]).resolve()
    path = Path(choice.path).expanduser()
    if not path.exists():
        raise ApiError(f"lora_request.lora_path {choice.path} does not exist on the server's filesystem.",
                       param="lora_request.lora_path")
    if not path.is_dir():
        raise ApiError(f"lora_request.lora_path {choice.path} is not a folder (a PEFT adapter folder: "
                       "adapter_config.json + adapter_model.safetensors).", param="lora_request.lora_path")
    return path.resolve()


FINISH_REASONS = {"end_id": "stop", "stop_word": "stop", "stop": "stop", "length": "length", "cancelled": "abort"}


@dataclass(frozen=True)
class Answer:
    """What a response carries: the request's id, the model name, and the token counts."""

    id: str
    model: str
    endpoint: Endpoint
    created: int

    @classmethod
    def new(cls, model: str, endpoint: Endpoint) -> "Answer":
        prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
        return cls(f"{prefix}-{uuid.uuid4().hex}", model, endpoint, int(time.time()))

    def _choice(self, text: str | None, finish: str | None, *, delta: bool) -> dict[str, Any]:
        if self.endpoint == "completions":
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        key = "delta" if delta else "message"
        content = {"role": "assistant", "content": text} if not delta else ({"content": text} if text is not None else {})
        return {"index": 0, key: content, "logprobs": None, "finish_reason": finish}

    def _object(self, chunk: bool) -> str:
        if self.endpoint == "chat":
            return "chat.completion.chunk" if chunk else "chat.completion"
        return "text_completion"

    def whole(self, text: str, finish: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {"id": self.id, "object": self._object(False), "created": self.created, "model": self.model,
                "choices": [self._choice(text, finish, delta=False)],
                "usage": usage(prompt_tokens, completion_tokens)}

    def chunk(self, text: str | None, finish: str | None = None, *, role: bool = False) -> dict[str, Any]:
        choice = self._choice(text, finish, delta=True)
        if role and self.endpoint == "chat":
            choice["delta"] = {"role": "assistant", "content": ""}
        return {"id": self.id, "object": self._object(True), "created": self.created, "model": self.model,
                "choices": [choice]}

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {"id": self.id, "object": self._object(True), "created": self.created, "model": self.model,
                "choices": [], "usage": usage(prompt_tokens, completion_tokens)}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def streamable(text: str, stop: tuple[str, ...]) -> str:
    """The part of a growing text that can be sent now: not a trailing partial character (U+FFFD from an
    incomplete byte sequence), nor a tail that may be the start of a stop string (it would be cut later)."""
    text = text.rstrip("\ufffd")
    hold = 0
    for word in stop:
        for size in range(min(len(word) - 1, len(text)), 0, -1):
            if text.endswith(word[:size]):
                hold = max(hold, size)
                break
    return text[: len(text) - hold]

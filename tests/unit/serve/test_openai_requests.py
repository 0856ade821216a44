"""The CPU's own OpenAI server's requests: what it takes (trtllm-serve's `lora_request` included), what it refuses
with a 400 and an OpenAI-style error, the JSON it answers with, and which server `pipeline serve --api openai`
picks for a CPU deployable with adapters."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from llmapi_helpers import make_deployable  # noqa: E402

from pipeline.clients.openai import Event, _parse_object, error_message, lora_request  # noqa: E402
from pipeline.core.deployable import read_deployable  # noqa: E402
from pipeline.serve.openai import choose_engine  # noqa: E402
from pipeline.serve.openai_reference import deployable_adapters, reference_command  # noqa: E402
from pipeline.serve.openai_requests import (Answer, ApiError, LoraChoice, parse_lora, parse_request,  # noqa: E402
                                            resolve_lora_path, streamable)


def test_a_chat_request_with_the_clients_lora_request_is_parsed() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "stop": "\n",
            "lora_request": lora_request("sql", 3, "/adapters/sql")}  # what bench and smoke send
    request = parse_request(body, "chat")
    assert request.lora == LoraChoice("sql", 3, "/adapters/sql")
    assert (request.max_tokens, request.stream, request.include_usage, request.stop) == (8, True, True, ("\n",))
    assert request.temperature == 0.0 and request.messages[0]["content"] == "Hi"


def test_completions_defaults_and_one_prompt_in_a_list() -> None:
    request = parse_request({"prompt": ["Hello"]}, "completions")
    assert request.prompt == "Hello" and request.max_tokens is None and request.lora is None  # as trtllm-serve
    assert parse_request({"prompt": [1, 2, 3]}, "completions").prompt_ids == (1, 2, 3)
    assert parse_request({"messages": [{"role": "user", "content": "x"}]}, "chat").max_tokens is None  # to the context
    assert parse_request({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5},
                         "chat").max_tokens == 5


@pytest.mark.parametrize("lora, words", [
    ({"lora_name": "a", "lora_int_id": 0}, "start at 1"),
    ({"lora_name": "a", "lora_int_id": -2}, "start at 1"),
    ({"lora_name": "a", "lora_int_id": "1"}, "must be an integer"),
    ({"lora_name": "a", "lora_int_id": True}, "must be an integer"),
    ({"lora_int_id": 1}, "lora_name must be a non-empty string"),
    ({"lora_name": "a", "lora_int_id": 1, "lora_path": ""}, "lora_path must be a non-empty string"),
    ({"lora_name": "a", "lora_int_id": 1, "lora_ckpt_source": "nemo"}, "Hugging Face PEFT folders only"),
    ({"lora_name": "a", "lora_int_id": 1, "lora_ckpt_source": "gguf"}, "must be one of hf, nemo"),
    ("sql", "must be an object"),
])
def test_bad_lora_requests_are_400_with_the_field(lora, words: str) -> None:
    with pytest.raises(ApiError, match=words) as error:
        parse_request({"prompt": "x", "lora_request": lora}, "completions")
    body = error.value.body()
    assert error.value.status == 400 and body["error"]["code"] == 400 and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"].startswith("lora_request")
    assert words in error_message(body)  # what our own clients print


@pytest.mark.parametrize("body, endpoint, param", [
    ({"prompt": ""}, "completions", "prompt"),
    ({"prompt": ["a", "b"]}, "completions", "prompt"),
    ({"messages": []}, "chat", "messages"),
    ({"messages": [{"content": "x"}]}, "chat", "messages"),
    ({"prompt": "x", "max_tokens": 0}, "completions", "max_tokens"),
    ({"prompt": "x", "max_tokens": 2.5}, "completions", "max_tokens"),
    ({"prompt": "x", "n": 2}, "completions", "n"),
    ({"prompt": "x", "logprobs": 1}, "completions", "logprobs"),
    ({"prompt": "x", "suffix": "y"}, "completions", "suffix"),
    ({"prompt": "x", "temperature": -1}, "completions", "temperature"),
    ({"prompt": "x", "top_p": 0}, "completions", "top_p"),
    ({"prompt": "x", "stop": [""]}, "completions", "stop"),
])
def test_bad_requests_are_400_naming_the_field(body, endpoint, param) -> None:
    with pytest.raises(ApiError) as error:
        parse_request(body, endpoint)
    assert error.value.status == 400 and error.value.param == param


def test_lora_path_resolves_on_the_server_or_by_the_deployables_name(tmp_path: Path) -> None:
    folder = tmp_path / "sql"
    folder.mkdir()
    assert resolve_lora_path(LoraChoice("x", 1, str(folder)), {}) == folder.resolve()
    adapters = {"sql": (1, "/d/lora/sql")}
    assert resolve_lora_path(LoraChoice("sql", 5), adapters) == Path("/d/lora/sql")  # by name
    assert resolve_lora_path(LoraChoice("1", 1), adapters) == Path("/d/lora/sql")  # by id (smoke's default name)
    with pytest.raises(ApiError, match="does not exist on the server"):
        resolve_lora_path(LoraChoice("x", 1, str(tmp_path / "missing")), {})
    (tmp_path / "file").write_text("")
    with pytest.raises(ApiError, match="is not a folder"):
        resolve_lora_path(LoraChoice("x", 1, str(tmp_path / "file")), {})
    with pytest.raises(ApiError, match=r"no adapter of that name or id \(it has: sql \(id 1\)\)"):
        resolve_lora_path(LoraChoice("chat", 2), adapters)


def test_answers_parse_with_our_own_client() -> None:
    chat, text = Answer.new("m", "chat"), Answer.new("m", "completions")
    whole = chat.whole("Paris", "stop", 5, 2)
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"]["content"] == "Paris"
    assert _parse_object(whole) == Event(text="Paris", finish_reason="stop", completion_tokens=2, prompt_tokens=5)
    assert _parse_object(text.whole("Paris", "length", 5, 2)).text == "Paris"
    assert _parse_object(chat.chunk("Pa")).text == "Pa" and _parse_object(text.chunk("Pa")).text == "Pa"
    assert chat.chunk(None, role=True)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage = _parse_object(json.loads(json.dumps(chat.usage_chunk(5, 2))))
    assert (usage.prompt_tokens, usage.completion_tokens) == (5, 2)


def test_streamed_text_holds_back_a_partial_character_or_stop_string() -> None:
    assert streamable("Hello wor", ()) == "Hello wor"
    assert streamable("Hello \ufffd", ()) == "Hello "
    assert streamable("Hello wo", ("world",)) == "Hello "
    assert streamable("Hello w", ("xyz", "wx")) == "Hello "


def _deployable(tmp_path: Path, lora: dict | None):
    folder = make_deployable(tmp_path / "build")
    if lora is not None:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["lora"] = lora
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return read_deployable(folder)


def test_a_cpu_deployable_with_adapters_gets_the_reference_server(tmp_path: Path) -> None:
    deployable = _deployable(tmp_path, {"dir": "lora", "task_ids": {"sql": 1, "chat": 2}, "adapters": []})
    assert choose_engine(deployable) == "reference"
    assert reference_command(deployable, "127.0.0.1", 8123)[1:4] == ["-m", "pipeline.serve.openai_reference",
                                                                     str(deployable.path)]
    assert deployable_adapters(deployable) == {"sql": (1, str(deployable.path / "lora" / "sql")),
                                               "chat": (2, str(deployable.path / "lora" / "chat"))}
    assert choose_engine(replace(deployable, manifest={**deployable.manifest, "lora": {}})) == "transformers"

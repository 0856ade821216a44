"""`pipeline serve --api openai` for a CPU deployable with LoRA adapters, for real: the demo model built with two
PEFT adapters made here (`pipeline build --backend pytorch --gpu cpu --lora`), served by our own OpenAI server over
the reference runtime (pipeline/serve/openai_reference.py). The `openai` client, as it talks to trtllm-serve
(extra_body={"lora_request": ...}), gets PEFT's own greedy text; smoke's lora check and bench --lora-mix pass over
OpenAI. One server start covers every check."""

from __future__ import annotations

import pytest

from build_cases import in_build_root
from lora_cases import ATTENTION, MLP, bench_lora_mix, make_adapter, peft_greedy, smoke_lora

pytestmark = [pytest.mark.server, pytest.mark.slow]
PROMPT = "The capital of France is"
TOKENS = 12


@pytest.fixture(scope="module")
def lora_openai(demo_hf_dir, session_build_root, tmp_path_factory):
    from pipeline.build import BuildSpec, build_engine
    from pipeline.core.deployable import read_deployable
    from pipeline.serve.openai import OpenAISpec, start_openai_server

    root = tmp_path_factory.mktemp("lora-openai")
    sql = make_adapter(demo_hf_dir, root / "sql", rank=8, targets=ATTENTION, scale=0.2)
    chat = make_adapter(demo_hf_dir, root / "chat", rank=4, targets=ATTENTION + MLP, seed=2, scale=0.2)
    with in_build_root(session_build_root):  # beside the demo model, not in the checkout's build/
        deploy = build_engine(BuildSpec(gpu="cpu", backend="pytorch", checkpoint=demo_hf_dir, max_batch_size=4,
                                        max_seq_len=512, lora=(f"sql={sql}", f"chat={chat}"))).deploy_dir
    deployable = read_deployable(deploy)
    spec = OpenAISpec(deployable=deploy, http_port=0, log_file=root / "openai.log", ready_timeout_s=600)
    with start_openai_server(spec, deployable) as server:
        assert server.engine == "reference"
        yield server, deploy, {"sql": sql, "chat": chat}


@pytest.fixture(scope="module")
def client(lora_openai):
    from openai import OpenAI

    server, _, _ = lora_openai
    return OpenAI(base_url=server.url, api_key="unused", timeout=300, max_retries=0)


def _expected(demo_hf_dir, adapter, ids) -> str:
    from transformers import AutoTokenizer

    tokens, _ = peft_greedy(demo_hf_dir, adapter, ids, TOKENS)
    return AutoTokenizer.from_pretrained(demo_hf_dir).decode(tokens, skip_special_tokens=True)


def test_openai_client_with_lora_request_gets_pefts_greedy_text(lora_openai, client, demo_hf_dir) -> None:
    from transformers import AutoTokenizer

    server, _, adapters = lora_openai
    ids = AutoTokenizer.from_pretrained(demo_hf_dir)(PROMPT, add_special_tokens=True)["input_ids"]
    # lora_path: a folder on the server's filesystem (the adapter as PEFT saved it), under its own lora_int_id
    lora = {"lora_name": "sql-raw", "lora_int_id": 7, "lora_path": str(adapters["sql"])}
    adapted = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=TOKENS, temperature=0,
                                        extra_body={"lora_request": lora})
    base = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=TOKENS, temperature=0)
    want_adapted, want_base = _expected(demo_hf_dir, adapters["sql"], ids), _expected(demo_hf_dir, None, ids)
    assert want_adapted != want_base
    assert adapted.choices[0].text == want_adapted
    assert base.choices[0].text == want_base
    assert adapted.usage.prompt_tokens == len(ids) and 1 <= adapted.usage.completion_tokens <= TOKENS

    stream = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=TOKENS, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"lora_request": lora})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == want_adapted and len([c for c in chunks if c.choices and c.choices[0].text]) >= 2
    assert chunks[-1].usage.completion_tokens == adapted.usage.completion_tokens


def test_chat_with_the_deployables_adapter_by_name(lora_openai, client, demo_hf_dir) -> None:
    from transformers import AutoTokenizer

    server, _, adapters = lora_openai
    tokenizer = AutoTokenizer.from_pretrained(demo_hf_dir)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                    add_special_tokens=False)["input_ids"]
    answer = client.chat.completions.create(model=server.model, messages=messages, max_tokens=TOKENS, temperature=0,
                                            extra_body={"lora_request": {"lora_name": "chat", "lora_int_id": 2}})
    assert answer.choices[0].message.content == _expected(demo_hf_dir, adapters["chat"], ids)
    streamed = client.chat.completions.create(model=server.model, messages=messages, max_tokens=TOKENS, temperature=0,
                                              stream=True, extra_body={"lora_request": {"lora_name": "chat",
                                                                                        "lora_int_id": 2}})
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == answer.choices[0].message.content


@pytest.mark.parametrize("lora, words", [
    ({"lora_name": "sql", "lora_int_id": 0}, "adapter ids start at 1"),
    ({"lora_name": "nope", "lora_int_id": 9}, "no adapter of that name or id"),
    ({"lora_name": "x", "lora_int_id": 9, "lora_path": "/no/such/adapter"}, "does not exist on the server"),
])
def test_bad_adapters_are_400_with_an_openai_error(lora_openai, client, lora, words) -> None:
    import openai

    server, _, _ = lora_openai
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model=server.model, prompt=PROMPT, max_tokens=2, extra_body={"lora_request": lora})
    assert error.value.status_code == 400 and words in str(error.value)


def test_a_folder_that_is_not_an_adapter_or_a_reused_id_is_400(lora_openai, client, tmp_path) -> None:
    import openai

    server, _, adapters = lora_openai

    def send(task_id: int, path):
        return client.completions.create(model=server.model, prompt=PROMPT, max_tokens=2, extra_body={
            "lora_request": {"lora_name": "x", "lora_int_id": task_id, "lora_path": str(path)}})

    with pytest.raises(openai.BadRequestError, match="no adapter_config.json"):
        send(11, tmp_path)
    assert send(21, adapters["sql"]).choices[0].text
    with pytest.raises(openai.BadRequestError, match="already names the adapter"):
        send(21, adapters["chat"])


def test_smoke_lora_check_passes_over_openai(lora_openai, capsys) -> None:
    server, _, _ = lora_openai
    checks = smoke_lora(server.url, "--lora-name", "sql", capsys=capsys)  # lora_request by the deployable's name
    assert not any(c["skipped"] for c in checks.values())  # stop_word and too_long_prompt run here, unlike transformers


def test_bench_lora_mix_over_openai(lora_openai, tmp_path, capsys) -> None:
    server, deploy, _ = lora_openai
    level = bench_lora_mix(server.url, deploy, tmp_path, capsys)  # lora_request with each adapter's lora_path
    assert level["errors"] == 0

"""Which contract a server speaks, read from the server itself (not from model names).

  triton-ensemble  Triton gRPC; NVIDIA's ensemble / tensorrt_llm_bls tensors: text_input, max_tokens, stream
                   -> text_output (what `pipeline render` of an engine writes; smoke and bench as before);
  triton-llmapi    Triton gRPC; TensorRT-LLM's LLM-API model (triton_backend/all_models/llmapi): text_input,
                   streaming, sampling_param_* -> text_output, finish_reason (`pipeline render` of a PyTorch
                   deployable); tensor names in pipeline.clients.triton.LLMAPI_INPUTS / LLMAPI_OUTPUTS;
  openai           http(s)://HOST:PORT/v1: trtllm-serve, transformers serve (`pipeline serve --api openai`).

For Triton the served model's config (inputs, outputs, max_batch_size, transaction policy) decides; with no
--model, `ensemble` is used when the repository has it (today's default), else the one model whose config
has the LLM-API tensors. For OpenAI, /v1/models names the model (its first id, unless --model names one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from pipeline.clients.triton import LLMAPI_INPUTS, LLMAPI_OUTPUTS
from pipeline.core.errors import InvalidInputError, StageFailedError
from pipeline.clients.openai import Endpoint, parse_url

Kind = Literal["triton-ensemble", "triton-llmapi", "openai"]
ENSEMBLE_INPUTS = frozenset({"text_input", "max_tokens", "stream"})
TRITON_FRONT_MODELS = ("ensemble", "tensorrt_llm_bls")


@dataclass(frozen=True)
class Served:
    """What a client needs to know about the served model."""

    kind: Kind
    url: str  # gRPC HOST:PORT, or the OpenAI base URL (.../v1)
    model: str  # Triton model name, or the OpenAI model id
    inputs: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset()
    batched: bool = True  # Triton: the model has a batch dimension (max_batch_size > 0)
    decoupled: bool | None = None
    tokenizer_dir: Path | None = None
    endpoint: Endpoint = "chat"

    @property
    def llmapi_options(self) -> dict | None:
        """pipeline.clients.triton.generate's `llmapi` keywords for this model (None: not the LLM-API contract)."""
        return {"batched": self.batched, "declared": self.inputs} if self.kind == "triton-llmapi" else None


def classify_triton(inputs: Iterable[str], outputs: Iterable[str]) -> Kind | None:
    """The contract a Triton model's tensor names make (None: neither text contract, e.g. the token-level
    tensorrt_llm model of the C++ backend, whose inputs are input_ids and request_output_len)."""
    inputs, outputs = frozenset(inputs), frozenset(outputs)
    if "text_output" not in outputs:
        return None
    if ENSEMBLE_INPUTS <= inputs:
        return "triton-ensemble"
    if LLMAPI_INPUTS <= inputs and LLMAPI_OUTPUTS <= outputs:
        return "triton-llmapi"
    return None


def detect(url: str, model: str | None = None, *, endpoint: Endpoint = "chat", timeout_s: float = 10.0) -> Served:
    """Ask the server. Raises InvalidInputError for a bad --url or a model that speaks no text contract,
    StageFailedError when the server does not answer."""
    parsed = parse_url(url)
    if parsed.kind == "openai":
        return _detect_openai(parsed.url, model, endpoint, timeout_s)
    return _detect_triton(parsed.url, model)


def _detect_openai(base_url: str, model: str | None, endpoint: Endpoint, timeout_s: float) -> Served:
    import asyncio

    import aiohttp

    from pipeline.clients.openai import probe

    try:
        found = probe(base_url, timeout_s)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as error:
        raise StageFailedError(f"The OpenAI-compatible server at {base_url} does not answer GET /v1/models: "
                               f"{type(error).__name__}: {error}".rstrip(": "),
                               hint="Start it (`pipeline serve --api openai DEPLOYABLE`) and check --url "
                                    "(http://HOST:PORT/v1).") from None
    if model and model not in TRITON_FRONT_MODELS:
        if found.models and model not in found.models:
            raise InvalidInputError(f"{base_url} serves {list(found.models)}, not {model!r}.",
                                    hint="Leave out --model (the served model is used) or name one of those.")
        chosen = model
    elif found.models:
        chosen = found.models[0]
    else:
        raise StageFailedError(f"{base_url}/models lists no model.", hint="Wait until the server has loaded its model.")
    folder = Path(chosen)
    tokenizer = folder if folder.is_dir() and (folder / "tokenizer_config.json").is_file() else None
    return Served(kind="openai", url=base_url, model=chosen, endpoint=endpoint, tokenizer_dir=tokenizer)


def _detect_triton(url: str, model: str | None) -> Served:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from pipeline.clients.triton import is_decoupled

    client = grpcclient.InferenceServerClient(url)
    try:
        try:
            if model is None:
                model = _default_triton_model(client)
            config = client.get_model_config(model).config
            decoupled = is_decoupled(client, model)
        except InferenceServerException as error:
            what = f"model {model!r}" if model else "the model repository"
            raise StageFailedError(f"Cannot query {what} at {url}: {error.message()}",
                                   hint="Check --url (the gRPC port, 8001 by default) and --model.") from None
        inputs = frozenset(i.name for i in config.input)
        outputs = frozenset(o.name for o in config.output)
        kind = classify_triton(inputs, outputs)
        if kind is None:
            raise InvalidInputError(
                f"Model {model!r} at {url} speaks neither text contract: inputs {sorted(inputs)}.",
                hint="Name the ensemble or tensorrt_llm_bls model of an engine repository (text_input, max_tokens, "
                     "stream), or the tensorrt_llm model of an LLM-API repository (text_input, streaming, "
                     "sampling_param_*).")
        return Served(kind=kind, url=url, model=model, inputs=inputs, outputs=outputs, batched=config.max_batch_size > 0,
                      decoupled=decoupled, tokenizer_dir=served_tokenizer_dir(client, config))
    finally:
        client.close()


def _default_triton_model(client) -> str:
    """`ensemble` when the repository has it, else the one model with the LLM-API tensors."""
    names = [m.name for m in client.get_model_repository_index().models]
    if "ensemble" in names or not names:
        return "ensemble"
    for name in names:
        try:
            config = client.get_model_config(name).config
        except Exception:  # noqa: BLE001 - an unloaded model has no config to read
            continue
        if classify_triton((i.name for i in config.input), (o.name for o in config.output)) == "triton-llmapi":
            return name
    return "ensemble"


def served_tokenizer_dir(client: Any, config: Any) -> Path | None:
    """tokenizer_dir of the preprocessing model (or of the model itself, for BLS-like models)."""
    from tritonclient.utils import InferenceServerException

    candidates = [config]
    try:
        candidates.append(client.get_model_config("preprocessing").config)
    except InferenceServerException:
        pass
    for cfg in candidates:
        param = cfg.parameters.get("tokenizer_dir")
        if param is not None and param.string_value and not param.string_value.startswith("${"):
            return Path(param.string_value)
    return None

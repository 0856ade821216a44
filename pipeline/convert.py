"""The convert stage: a Hugging Face checkpoint becomes a TensorRT-LLM checkpoint
(`build/<model>/checkpoints/<ckpt-id>/`: config.json, one rank<N>.safetensors per tp x pp rank,
manifest.json), quantized with NVIDIA ModelOpt and written by ModelOpt's
`export_tensorrt_llm_checkpoint`, the same path as TensorRT-LLM's own quantize script.
With `format="hf"` it becomes a ModelOpt unified HF checkpoint for TensorRT-LLM's PyTorch backend
instead (`checkpoints/hf-<...>/`, written by `export_hf_checkpoint`; see pipeline.hf_export), from
the same quantization, pre-checks and manifest.

Everything that can be refused is refused before the model is loaded: an unknown GPU, a precision
the GPU cannot run, a dtype that contradicts the format, tp/pp that do not split the model, an
architecture the export does not support, a missing or unreadable checkpoint, empty calibration
data, an AWQ block size the model cannot use. The same inputs again are a no-op.
Events and progress go to the `Reporter` passed in (pipeline.reporting: silent by default, the CLI
renders them), and so do those of the download a source that is not a folder starts.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import time
import warnings
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from pipeline.artifacts import MANIFEST_NAME, atomic_dir, build_manifest, is_up_to_date, read_manifest, sha256_json, write_json_atomic
from pipeline.calibration import DEFAULT_CALIB_SIZE, CalibrationSet, load_calibration
from pipeline.deployable import HF_FORMAT, TRTLLM_FORMAT
from pipeline.download import DownloadSpec, download
from pipeline.download_hub import hub_cache_dir, hub_offline
from pipeline.download_sources import parse_source
from pipeline.errors import InvalidInputError, StageFailedError, UnsupportedError
from pipeline.gpus import check_precision, get_gpu
from pipeline.hf_checkpoint import check_checkpoint_folder
from pipeline.hf_compat import RopeSettings, causal_lm_class, read_json_object, resolved_rope
from pipeline.paths import build_root, model_slug, stage_dir
from pipeline.placement import Device, Job, Placement
from pipeline.quant import KvCacheFormat, QuantFormat, kv_cache_format, quant_format
from pipeline.reporting import SILENT, Reporter
from pipeline.resources import check_disk

Dtype = Literal["float16", "bfloat16"]

# Bump when what convert writes changes, so existing checkpoints are made again.
# 2: config.json completed and checked against TensorRT-LLM's model classes (pipeline.checkpoint_keys).
CONVERTER_VERSION = 2

# HF architectures ModelOpt's TensorRT-LLM export handles as plain decoder-only models, with the
# decoder type it is given, restricted to those TensorRT-LLM 1.1 builds with trtllm-build. Each one
# has rows in pipeline/data/trtllm_checkpoint_keys.tsv and is converted (fp8 and int8_sq) from a tiny
# model in tests/conformance/.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen",
    "GemmaForCausalLM": "gemma",
    "GPT2LMHeadModel": "gpt",
}

# Architectures TensorRT-LLM 1.1 builds but the installed ModelOpt cannot export to a TensorRT-LLM
# checkpoint (tried on tiny models of each, fp8, ModelOpt 0.47 + transformers 5): refused up front.
NOT_EXPORTABLE: dict[str, str] = {
    "MixtralForCausalLM": "ModelOpt's TensorRT-LLM export fails on transformers 5's fused MoE experts "
                          "(TypeError: object of type 'QuantMixtralExperts' has no len())",
    "Gemma2ForCausalLM": "ModelOpt refuses the TensorRT-LLM checkpoint export for Gemma 2 (it offers only its "
                         "unified HF checkpoint, for TensorRT-LLM's PyTorch backend)",
    "Phi3ForCausalLM": "ModelOpt refuses the TensorRT-LLM checkpoint export for Phi-3 (it offers only its "
                       "unified HF checkpoint, for TensorRT-LLM's PyTorch backend)",
}

_PACKAGES = ("nvidia-modelopt", "torch", "transformers", "safetensors")


class ConvertSpec(BaseModel):
    """What to convert and how. `root` is the build/ root (default: pipeline.paths.build_root())."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="an HF checkpoint folder, or a download source (hf:, local:, gguf:, demo)")
    quant: str = "fp16"
    kv_cache: Optional[str] = None
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    gpu: Optional[str] = None
    calib_data: Optional[Path] = None
    calib_size: int = Field(DEFAULT_CALIB_SIZE, ge=1)
    calib_batch_size: int = Field(4, ge=0, description="samples per calibration forward pass; 0 = as many as fit")
    calib_max_len: int = Field(256, ge=8)
    dtype: Optional[Dtype] = None
    device: Device = Field("auto", description="auto: the GPUs when the model fits them, else the CPU (with a warning)")
    force: bool = False
    root: Optional[Path] = None
    format: str = Field("trtllm", description="trtllm: TensorRT-LLM checkpoint; hf: ModelOpt unified HF checkpoint")


class ConvertResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    ckpt_id: str
    path: Path
    hf_dir: Path
    quant: str
    kv_cache: str
    tp: int
    pp: int
    dtype: str
    quant_algo: Optional[str]
    kv_cache_quant_algo: Optional[str]
    ranks: int
    bytes: int
    calibration: Optional[dict[str, Any]]
    skipped: bool  # True when an identical, intact checkpoint was already there
    duration_s: float
    peak_rss_mb: Optional[float] = None
    device: Optional[str] = None  # where the model ran ("cpu" / "cuda"); None for a no-op
    format: str = "trtllm"


class _ConvertDecisions(BaseModel):
    """Everything decided before any work: validated formats, source and identity."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    format: str
    fmt: QuantFormat
    kv: KvCacheFormat
    dtype: Dtype
    hf_dir: Path
    model: str
    decoder_type: str
    hf_config: dict[str, Any]
    rope: RopeSettings
    calibration: Optional[CalibrationSet]
    awq_block: Optional[int]
    inputs: dict[str, Any]
    inputs_hash: str
    ckpt_id: str
    out: Path


def convert(spec: ConvertSpec, reporter: Reporter = SILENT) -> ConvertResult:
    """Quantize and export spec.model to build/<model>/checkpoints/<ckpt-id>/; a no-op when an
    identical intact checkpoint exists (unless spec.force). Events and progress go to reporter
    (silent by default), and so do those of the download it may start."""
    started = time.time()
    plan = plan_convert(spec, reporter)
    if not spec.force and is_up_to_date(plan.out, plan.inputs_hash):
        return _result(plan, read_manifest(plan.out) or {}, skipped=True, started=started)

    placement = check_resources(plan, spec)
    if placement.warning:
        reporter.warn(placement.warning)
    where = "CPU" if placement.device == "cpu" else f"GPU {', '.join(map(str, placement.gpus))}"
    reporter.info(f"convert: {plan.hf_dir} -> {plan.out} ({plan.fmt.name}, KV {plan.kv.name}, tp {spec.tp}, pp {spec.pp}, "
                  f"{plan.dtype}, on the {where})")
    captured = io.StringIO()
    with atomic_dir(plan.out) as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            timings, used = _quantize_and_export(plan, spec, placement, tmp, captured, reporter)
        except (RuntimeError, ValueError, TypeError, AssertionError, NotImplementedError, KeyError) as error:
            tail = captured.getvalue().strip().splitlines()[-5:]
            raise StageFailedError(
                f"ModelOpt could not convert {plan.model} to {plan.fmt.name}: {type(error).__name__}: {error}",
                hint="Re-run with --debug for the traceback" + (f"; ModelOpt said: {' | '.join(tail)}" if tail else "."),
            ) from error
        if plan.format == HF_FORMAT:
            from pipeline import hf_export

            quantization, fixes = hf_export.finish(tmp, plan.hf_dir, plan.fmt, plan.kv, plan.dtype, plan.awq_block)
            quantization = quantization or {}
        else:
            config, fixes = _finish_config(tmp / "config.json", plan)
            quantization = config["quantization"]
        manifest = build_manifest(
            stage="convert",
            inputs=plan.inputs,
            inputs_hash=plan.inputs_hash,
            folder=tmp,
            started=started,
            packages=_PACKAGES,
            extra={
                "format": plan.format,
                "model": plan.model,
                "ckpt_id": plan.ckpt_id,
                "hf_dir": str(plan.hf_dir),
                "quant": plan.fmt.name,
                "kv_cache": plan.kv.name,
                "tp": spec.tp,
                "pp": spec.pp,
                "dtype": plan.dtype,
                "quant_algo": quantization.get("quant_algo"),
                "kv_cache_quant_algo": quantization.get("kv_cache_quant_algo"),
                "decoder_type": plan.decoder_type,
                "config_fixes": fixes,
                "awq_block_size": plan.awq_block,
                "calibration": plan.calibration.summary() if plan.calibration else None,
                "calibration_run": used if plan.calibration else None,
                "placement": placement.summary(),
                "timings_s": timings,
                "peak_rss_mb": peak_rss_mb(),
                "modelopt_warnings": _warnings_worth_keeping(caught),
            },
        )
        write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return _result(plan, manifest, skipped=False, started=started, device=placement.device)


def plan_convert(spec: ConvertSpec, reporter: Reporter = SILENT) -> _ConvertDecisions:
    """Validate everything and decide the checkpoint's identity, without loading the model.

    A download source is fetched (or found already fetched) here; that is the download stage's own
    no-op-or-work."""
    from pipeline import hf_export

    checkpoint_format = hf_export.checkpoint_format(spec.format)
    fmt = quant_format(spec.quant)
    kv = kv_cache_format(spec.kv_cache)
    if checkpoint_format == HF_FORMAT:
        hf_export.check_hf_request(fmt, kv, spec.tp, spec.pp)
    if spec.gpu is not None:
        check_precision(get_gpu(spec.gpu), fmt, kv)
    dtype = _resolve_dtype(fmt, spec.dtype)
    calibration = None
    if fmt.needs_calibration or kv.kv_cache_quant_algo is not None:
        calibration = load_calibration(spec.calib_data, spec.calib_size)
    elif spec.calib_data is not None:
        load_calibration(spec.calib_data, spec.calib_size)  # still refuse a bad file the user named
        reporter.info(f"convert: {fmt.name} needs no calibration; --calib-data is not used.")

    _check_hub_model_fits(spec, convert_job(spec, fmt, kv, dtype, calibration))
    hf_dir, model = _resolve_source(spec, reporter)
    hf_config = _read_hf_config(hf_dir)
    decoder_type = _check_architecture(hf_config, hf_dir)
    if checkpoint_format == HF_FORMAT:
        hf_export.check_architecture(_architecture_of(hf_config) or "", hf_dir)
    from pipeline.checkpoint_keys import preflight

    rope = resolved_rope(hf_dir, hf_config)
    if checkpoint_format == TRTLLM_FORMAT:  # what TensorRT-LLM's checkpoint classes reject
        preflight(_architecture_of(hf_config) or "", hf_config, rope)
    _check_parallel(hf_config, spec.tp, spec.pp)
    awq_block = None
    if "awq" in fmt.name:
        from pipeline.quantize import choose_awq_block

        awq_block = choose_awq_block(_linear_in_features(hf_config), spec.tp)

    from pipeline.engine.checkpoint import source_revision

    inputs = {
        "source_hash": source_revision(hf_dir),
        "quant": fmt.name,
        "kv_cache": kv.name,
        "tp": spec.tp,
        "pp": spec.pp,
        "dtype": dtype,
        "calibration": (
            {"sha256": calibration.sha256, "size": calibration.size, "batch_size": spec.calib_batch_size,
             "max_len": spec.calib_max_len}
            if calibration else None
        ),
        "awq_block_size": awq_block,
        "converter": CONVERTER_VERSION,
        "modelopt": _package_version("nvidia-modelopt"),
    }
    if checkpoint_format == HF_FORMAT:  # absent = trtllm, so trtllm checkpoint ids stay as they were
        inputs.update({"format": HF_FORMAT, "hf_export": hf_export.HF_EXPORT_VERSION})
    inputs_hash = sha256_json(inputs)
    ckpt_id = (hf_export.checkpoint_id(fmt.name, kv.name, inputs_hash) if checkpoint_format == HF_FORMAT
               else checkpoint_id(fmt.name, kv.name, spec.tp, spec.pp, inputs_hash))
    out = stage_dir(model, "checkpoints", ckpt_id, root=spec.root)
    return _ConvertDecisions(
        format=checkpoint_format, fmt=fmt, kv=kv, dtype=dtype, hf_dir=hf_dir, model=model, decoder_type=decoder_type, hf_config=hf_config, rope=rope,
        calibration=calibration, awq_block=awq_block, inputs=inputs, inputs_hash=inputs_hash, ckpt_id=ckpt_id, out=out,
    )


def checkpoint_id(quant: str, kv_cache: str, tp: int, pp: int, inputs_hash: str) -> str:
    """Readable and unique: e.g. `fp8-kvfp8-tp1-1a2b3c4d`, `int4_awq-tp2-pp2-…`."""
    kv = "" if kv_cache == "auto" else f"-kv{kv_cache}"
    pp_part = "" if pp == 1 else f"-pp{pp}"
    return f"{quant}{kv}-tp{tp}{pp_part}-{inputs_hash[:8]}"


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB: VmHWM of its own address space
    (getrusage's ru_maxrss also carries a parent's peak across fork and exec); ru_maxrss elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# ----------------------------------------------------------------------------------------------
# Checks


def _resolve_dtype(fmt: QuantFormat, asked: Optional[str]) -> Dtype:
    implied = {"fp16": "float16", "bf16": "bfloat16"}.get(fmt.name)
    if implied and asked and asked != implied:
        raise InvalidInputError(
            f"--quant {fmt.name} means {implied} weights, but --dtype {asked} was given.",
            hint=f"Drop --dtype, or use --quant {'bf16' if asked == 'bfloat16' else 'fp16'}.",
        )
    return implied or asked or "float16"  # type: ignore[return-value]


def _resolve_source(spec: ConvertSpec, reporter: Reporter) -> tuple[Path, str]:
    """(HF folder, model name): a folder is used in place; anything else goes through download."""
    candidate = Path(spec.model).expanduser()
    if candidate.is_dir():
        check_checkpoint_folder(candidate)
        folder = candidate.resolve()
        root = (spec.root or build_root()).resolve()
        # A `pipeline download` folder keeps its <model>; any other folder is named after itself.
        made_by = read_manifest(folder) or {}
        if made_by.get("stage") == "download" and isinstance(made_by.get("model"), str):
            model = model_slug(made_by["model"])
        elif root in folder.parents:
            model = folder.relative_to(root).parts[0]
        else:
            model = model_slug(folder.name)
        return folder, model
    result = download(DownloadSpec(source=spec.model, root=spec.root), reporter)
    return Path(result.path), result.model


def _read_hf_config(hf_dir: Path) -> dict[str, Any]:
    return read_json_object(hf_dir / "config.json", hint="Re-run `pipeline download --force`.")


def _architecture_of(config: dict[str, Any]) -> Optional[str]:
    architectures = config.get("architectures") or []
    return architectures[0] if architectures else causal_lm_class(config.get("model_type"))


def _check_architecture(config: dict[str, Any], hf_dir: Path) -> str:
    arch = _architecture_of(config)
    if arch in NOT_EXPORTABLE:
        raise UnsupportedError(
            f"Architecture {arch} of {hf_dir} cannot be converted here: {NOT_EXPORTABLE[arch]}.",
            hint=f"Supported: {', '.join(SUPPORTED_ARCHITECTURES)}.",
        )
    if arch not in SUPPORTED_ARCHITECTURES:
        shown = arch or f"(none; model_type {config.get('model_type')!r})"
        raise UnsupportedError(
            f"Architecture {shown} of {hf_dir} is not supported by ModelOpt's TensorRT-LLM export in this pipeline.",
            hint=f"Supported: {', '.join(SUPPORTED_ARCHITECTURES)}.",
        )
    return SUPPORTED_ARCHITECTURES[arch]


def _check_parallel(config: dict[str, Any], tp: int, pp: int) -> None:
    heads = int(config.get("num_attention_heads") or 0)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    layers = int(config.get("num_hidden_layers") or 0)

    def divisors(n: int) -> str:
        return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)

    if heads and heads % tp:
        raise InvalidInputError(
            f"--tp {tp} does not divide the model's {heads} attention heads.",
            hint=f"Use a tp size that divides both {heads} attention heads and {kv_heads} KV heads: "
            f"{', '.join(str(d) for d in range(1, heads + 1) if heads % d == 0 and kv_heads % d == 0)}.",
        )
    if kv_heads and kv_heads % tp:
        raise InvalidInputError(
            f"--tp {tp} does not divide the model's {kv_heads} KV heads (grouped-query attention).",
            hint=f"Use a tp size that divides {kv_heads}: {divisors(kv_heads)}.",
        )
    if layers and pp > layers:
        raise InvalidInputError(
            f"--pp {pp} is more than the model's {layers} layers.", hint=f"Use --pp {layers} or less."
        )


def _linear_in_features(config: dict[str, Any]) -> dict[str, int]:
    """In-features of one decoder layer's quantized linears, from the HF config (Llama-style names)."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    intermediate = int(config.get("intermediate_size") or 4 * hidden)
    return {
        "self_attn.q_proj": hidden, "self_attn.k_proj": hidden, "self_attn.v_proj": hidden,
        "self_attn.o_proj": heads * head_dim, "mlp.gate_proj": hidden, "mlp.up_proj": hidden,
        "mlp.down_proj": intermediate,
    }


# ----------------------------------------------------------------------------------------------
# Resources: memory and disk, from config.json alone, before anything loads


def convert_job(spec: ConvertSpec, fmt: QuantFormat, kv: KvCacheFormat, dtype: str, calibration: Optional[CalibrationSet]) -> Job:
    """The convert job the memory pre-check sizes (calibration samples x calib_max_len tokens)."""
    quantized = fmt.modelopt_config is not None or kv.kv_cache_quant_algo is not None
    return Job(kind="convert", load_dtype=dtype, quant=fmt.name, quantized=quantized, tp=spec.tp, pp=spec.pp,
               samples=calibration.size if calibration else 0, seq_len=spec.calib_max_len,
               batch_size=spec.calib_batch_size, passes=2 if "awq" in fmt.name else 1)


def check_resources(plan: _ConvertDecisions, spec: ConvertSpec) -> Placement:
    """Where the model goes (pipeline.placement), refused with exit 2 when it fits nowhere; and room
    on disk for the checkpoint. Runs after the no-op check: an up-to-date checkpoint needs neither."""
    from pipeline.placement import model_shape, place
    from pipeline.resources import free_disk_bytes, machine

    job = convert_job(spec, plan.fmt, plan.kv, plan.dtype, plan.calibration)
    shape = model_shape(plan.hf_dir)
    placement = place(shape, job, machine(), spec.device, name=plan.model)
    check_disk(plan.out, placement.footprint.checkpoint, what=f"the {plan.fmt.name} checkpoint of {plan.model}",
               free=free_disk_bytes(plan.out))
    return placement


def _check_hub_model_fits(spec: ConvertSpec, job: Job) -> None:
    """For an hf: source not downloaded yet: fetch its config.json alone (into the HF cache) and run
    the memory pre-check before the weights are downloaded. Skipped when the Hub cannot be asked;
    the check after the download still runs before anything loads."""
    if Path(spec.model).expanduser().is_dir() or not spec.model.startswith("hf:"):
        return
    parsed = parse_source(spec.model)
    if (read_manifest(stage_dir(parsed.model, "hf", root=spec.root)) or {}).get("stage") == "download":
        return
    import os

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:  # the revision is resolved to a commit first, as the download itself will do
        folder = snapshot_download(parsed.location, revision=parsed.revision, cache_dir=hub_cache_dir(),
                                   allow_patterns=["config.json"], local_files_only=hub_offline(),
                                   endpoint=os.environ.get("HF_ENDPOINT") or None)
    except (HfHubHTTPError, OSError, ValueError):
        return
    config = Path(folder) / "config.json"
    if not config.is_file():
        return
    from pipeline.placement import model_shape, place
    from pipeline.resources import machine

    place(model_shape(config), job, machine(), spec.device, name=parsed.display)


# ----------------------------------------------------------------------------------------------
# Work


def _quantize_and_export(
    plan: _ConvertDecisions, spec: ConvertSpec, placement: Placement, tmp: Path, captured: io.StringIO, reporter: Reporter
) -> tuple[dict[str, float], dict[str, Any]]:
    """Load (where `placement` says), quantize (with a progress bar over calibration batches) and
    export into tmp; (timings, what the calibration used).

    ModelOpt prints to stdout; that goes into `captured` so --json output stays clean."""
    from pipeline.placement import batch_for_free_memory
    from pipeline.quantize import (
        calibration_steps,
        free_gpu_memory,
        load_hf_model,
        prepare_for_export,
        quantize_model,
        torch_dtype,
    )

    timings: dict[str, float] = {}
    texts = list(plan.calibration.texts) if plan.calibration else []
    with reporter.progress() as progress, contextlib.redirect_stdout(captured):
        task = progress.start("load", total=1)
        mark = time.time()
        model, tokenizer = load_hf_model(plan.hf_dir, plan.dtype, placement)
        timings["load"] = round(time.time() - mark, 3)
        progress.finish(task)

        batch_size = batch_for_free_memory(placement, free_gpu_memory() if placement.device == "cuda" else {})
        steps = calibration_steps(plan.fmt, plan.kv, len(texts), batch_size)
        task = progress.start(f"calibrate {plan.fmt.name}", total=max(steps, 1))

        def advance(_index: int, _total: int) -> None:
            progress.advance(task)

        stats: dict[str, int] = {}
        mark = time.time()
        model = quantize_model(
            model, tokenizer, plan.fmt, plan.kv, texts,
            batch_size=batch_size, max_len=spec.calib_max_len, tp=spec.tp, progress=advance, stats=stats,
        )
        timings["quantize"] = round(time.time() - mark, 3)
        progress.finish(task)

        hf = plan.format == HF_FORMAT
        task = progress.start("export hf" if hf else f"export tp{spec.tp} pp{spec.pp}", total=1)
        mark = time.time()
        import torch
        from modelopt.torch.export import export_tensorrt_llm_checkpoint

        del tokenizer
        prepare_for_export(model, on_gpus=placement.device == "cuda")
        if hf:
            from pipeline.hf_export import export

            export(model, torch_dtype(plan.dtype), tmp)
        else:
            with torch.inference_mode():
                export_tensorrt_llm_checkpoint(
                    model, plan.decoder_type, torch_dtype(plan.dtype), export_dir=tmp,
                    inference_tensor_parallel=spec.tp, inference_pipeline_parallel=spec.pp,
                )
        timings["export"] = round(time.time() - mark, 3)
        progress.finish(task)
    del model
    used = {"batch_size_used": batch_size, "oom_splits": stats.get("splits", 0)}
    if hf:
        return timings, used
    expected = spec.tp * spec.pp
    ranks = sorted(tmp.glob("rank*.safetensors"))
    if len(ranks) != expected or not (tmp / "config.json").is_file():
        raise StageFailedError(
            f"ModelOpt wrote {len(ranks)} rank files (expected {expected}) and "
            f"{'a' if (tmp / 'config.json').is_file() else 'no'} config.json.",
            hint="Re-run with --debug; this is a ModelOpt export problem.",
        )
    return timings, used


def _finish_config(path: Path, plan: _ConvertDecisions) -> tuple[dict[str, Any], list[str]]:
    """Complete what ModelOpt's export leaves out or gets wrong, then check the result against what
    TensorRT-LLM's model class reads (pipeline/data/trtllm_checkpoint_keys.tsv); (config, changes).

    - int4_wo: ModelOpt has no TensorRT-LLM export for per-channel INT4 weight-only, so (as
      TensorRT-LLM's quantize script does) the weights stay 16-bit and quant_algo says W4A16;
      trtllm-build quantizes them when it loads the checkpoint.
    - a 16-bit format with no KV quantization has quant_algo and kv_cache_quant_algo null.
    - the keys the HF config decides (qwen_type, rotary_base, rotary_scaling, GPT-2's learned position
      embedding, ...) are set from it on every export path: ModelOpt's own config writer (no
      TensorRT-LLM installed) leaves qwen_type out and gives GPT-2 RoPE; TensorRT-LLM's
      from_hugging_face under transformers 5 falls back to rotary_base 10000 and copies
      `rope_parameters` as rotary_scaling {"rope_type": "default"}, which TensorRT-LLM rejects.
    - an empty per-layer quant_cfg.json is removed.

    A config TensorRT-LLM would still reject or read differently is refused (InvalidInputError, naming the key).
    """
    from pipeline.checkpoint_keys import check_checkpoint_config, complete_checkpoint_config
    from pipeline.quant import WEIGHTS_PACKED_AT_BUILD

    config = json.loads(path.read_text(encoding="utf-8"))
    quantization = config.setdefault("quantization", {})
    if plan.fmt.name in WEIGHTS_PACKED_AT_BUILD:
        quantization["quant_algo"] = WEIGHTS_PACKED_AT_BUILD[plan.fmt.name]
    elif not plan.fmt.is_quantized:
        quantization["quant_algo"] = None
    if plan.kv.kv_cache_quant_algo is None:
        quantization["kv_cache_quant_algo"] = None
    changes = complete_checkpoint_config(config, plan.hf_config, plan.rope)
    check_checkpoint_config(config, plan.hf_config, plan.rope)
    write_json_atomic(path, config)
    _drop_empty_layer_config(path.parent / "quant_cfg.json")
    return config, changes


def _drop_empty_layer_config(path: Path) -> None:
    """ModelOpt writes quant_cfg.json (per-layer formats, read by TensorRT-LLM only for
    MIXED_PRECISION) whenever its layer map exists, even empty; an empty one says nothing."""
    if not path.is_file():
        return
    try:
        layers = json.loads(path.read_text(encoding="utf-8")).get("quantized_layers")
    except (OSError, ValueError, AttributeError):
        return
    if not layers:
        path.unlink()


def _result(plan: _ConvertDecisions, manifest: dict[str, Any], *, skipped: bool, started: float, device: Optional[str] = None) -> ConvertResult:
    files = manifest.get("files") or {}
    return ConvertResult(
        model=plan.model,
        ckpt_id=plan.ckpt_id,
        path=plan.out,
        hf_dir=plan.hf_dir,
        quant=plan.fmt.name,
        kv_cache=plan.kv.name,
        tp=int(plan.inputs["tp"]),
        pp=int(plan.inputs["pp"]),
        dtype=plan.dtype,
        quant_algo=manifest.get("quant_algo"),
        kv_cache_quant_algo=manifest.get("kv_cache_quant_algo"),
        ranks=sum(1 for name in files if name.startswith("rank") and name.endswith(".safetensors")),
        bytes=sum(int(meta.get("size", 0)) for meta in files.values()),
        calibration=plan.calibration.summary() if plan.calibration else None,
        skipped=skipped,
        duration_s=round(time.time() - started, 3),
        peak_rss_mb=None if skipped else manifest.get("peak_rss_mb"),
        device=device,
        format=plan.format,
    )


# Warnings that say nothing about this checkpoint: ModelOpt warns "Enable lm_head quantization"
# whenever the lm_head's (disabled) quantizers exist; torch warns about its own deprecations.
_NOISE = ("Enable lm_head quantization", "torch.jit")


def _warnings_worth_keeping(caught: list[warnings.WarningMessage]) -> list[str]:
    messages = {str(w.message).strip().splitlines()[0][:200] for w in caught}
    return sorted(m for m in messages if m and not any(noise in m for noise in _NOISE))


def _package_version(name: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


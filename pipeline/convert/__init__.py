"""The convert stage: a Hugging Face checkpoint becomes a TensorRT-LLM checkpoint
(`build/<model>/checkpoints/<ckpt-id>/`: config.json, one rank<N>.safetensors per tp x pp rank,
manifest.json), quantized with NVIDIA ModelOpt and written by ModelOpt's
`export_tensorrt_llm_checkpoint`, the same path as TensorRT-LLM's own quantize script.
With `format="hf"` it becomes a ModelOpt unified HF checkpoint for TensorRT-LLM's PyTorch backend
instead (`checkpoints/hf-<...>/`, written by `export_hf_checkpoint`; see pipeline.convert.hf_export), from
the same quantization, pre-checks and manifest.

Everything that can be refused is refused before the model is loaded: an unknown GPU, a precision
the GPU cannot run, a dtype that contradicts the format, tp/pp that do not split the model, an
architecture the export does not support, a missing or unreadable checkpoint, empty calibration
data, an AWQ block size the model cannot use. The same inputs again are a no-op.
Events and progress go to the `Reporter` passed in (pipeline.core.reporting: silent by default, the CLI
renders them), and so do those of the download a source that is not a folder starts.
"""

from __future__ import annotations

import io
import time
import warnings

from pipeline.convert import hf_export
from pipeline.core.artifacts import MANIFEST_NAME, ArtifactOrigin, atomic_dir, build_manifest, reusable, read_manifest, sha256_json, source_revision, write_json_atomic
from pipeline.quantization.calibration import load_calibration
from pipeline.convert.checkpoint_keys import preflight
from pipeline.convert.checks import (  # noqa: F401 (SUPPORTED_ARCHITECTURES, NOT_EXPORTABLE: re-exported)
    NOT_EXPORTABLE,
    SUPPORTED_ARCHITECTURES,
    architecture_of,
    check_architecture,
    check_parallel,
    linear_in_features,
    read_hf_config,
    resolve_dtype,
    resolve_source,
)
from pipeline.convert.lora_set import LORA_SUBDIR, adapters_for_checkpoint, adapters_identity, convert_adapters, lora_record
from pipeline.convert.export import finish_config, quantize_and_export, warnings_worth_keeping
from pipeline.convert.resources import check_hub_model_fits, check_resources, convert_job
from pipeline.convert.result import convert_result, package_version, peak_rss_mb
from pipeline.convert.spec import ConvertDecisions, ConvertResult, ConvertSpec
from pipeline.core.deployable import HF_FORMAT, TRTLLM_FORMAT
from pipeline.core.errors import StageFailedError
from pipeline.core.gpus import check_precision, get_gpu
from pipeline.hf.compat import resolved_rope
from pipeline.core.paths import stage_dir
from pipeline.core.quant import kv_cache_format, quant_format
from pipeline.quantization.modelopt import choose_awq_block
from pipeline.core.reporting import SILENT, Reporter

__all__ = ["CONVERTER_VERSION", "NOT_EXPORTABLE", "SUPPORTED_ARCHITECTURES", "ConvertResult", "ConvertSpec", "checkpoint_id",
           "check_resources", "convert", "convert_job", "peak_rss_mb", "plan_convert"]

# Bump when what convert writes changes, so existing checkpoints are made again.
# 2: config.json completed and checked against TensorRT-LLM's model classes (pipeline.convert.checkpoint_keys).
CONVERTER_VERSION = 2

_PACKAGES = ("nvidia-modelopt", "torch", "transformers", "safetensors")


def convert(spec: ConvertSpec, reporter: Reporter = SILENT) -> ConvertResult:
    """Quantize and export spec.model to build/<model>/checkpoints/<ckpt-id>/; a no-op when an
    identical intact checkpoint exists (unless spec.force). Events and progress go to reporter
    (silent by default), and so do those of the download it may start."""
    started = time.time()
    plan = plan_convert(spec, reporter)
    if not spec.force and reusable(plan.out, plan.inputs_hash):
        return convert_result(plan, read_manifest(plan.out) or {}, skipped=True, started=started)

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
            timings, used = quantize_and_export(plan, spec, placement, tmp, captured, reporter)
        except (RuntimeError, ValueError, TypeError, AssertionError, NotImplementedError, KeyError) as error:
            tail = captured.getvalue().strip().splitlines()[-5:]
            raise StageFailedError(
                f"ModelOpt could not convert {plan.model} to {plan.fmt.name}: {type(error).__name__}: {error}",
                hint="Re-run with --debug for the traceback" + (f"; ModelOpt said: {' | '.join(tail)}" if tail else "."),
            ) from error
        if plan.format == HF_FORMAT:
            quantization, fixes = hf_export.finish(tmp, plan.hf_dir, plan.fmt, plan.kv, plan.dtype, plan.awq_block)
            quantization = quantization or {}
        else:
            config, fixes = finish_config(tmp / "config.json", plan)
            quantization = config["quantization"]
        manifest = build_manifest(
            ArtifactOrigin("convert", plan.inputs, plan.inputs_hash, _PACKAGES),
            tmp,
            started,
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
                "modelopt_warnings": warnings_worth_keeping(caught),
            },
        )
        if plan.lora:
            adapters = convert_adapters(plan.lora, plan.lora_shape, tmp / LORA_SUBDIR)
            manifest["lora"] = lora_record(adapters, plan.lora_shape)
        write_json_atomic(tmp / MANIFEST_NAME, manifest)
    return convert_result(plan, manifest, skipped=False, started=started, device=placement.device)


def plan_convert(spec: ConvertSpec, reporter: Reporter = SILENT) -> ConvertDecisions:
    """Validate everything and decide the checkpoint's identity, without loading the model.

    A download source is fetched (or found already fetched) here; that is the download stage's own
    no-op-or-work."""
    checkpoint_format = hf_export.checkpoint_format(spec.format)
    fmt = quant_format(spec.quant)
    kv = kv_cache_format(spec.kv_cache)
    if checkpoint_format == HF_FORMAT:
        hf_export.check_hf_request(fmt, kv, spec.tp, spec.pp)
    if spec.gpu is not None:
        check_precision(get_gpu(spec.gpu), fmt, kv)
    dtype = resolve_dtype(fmt, spec.dtype)
    calibration = None
    if fmt.needs_calibration or kv.kv_cache_quant_algo is not None:
        calibration = load_calibration(spec.calib_data, spec.calib_size)
    elif spec.calib_data is not None:
        load_calibration(spec.calib_data, spec.calib_size)  # still refuse a bad file the user named
        reporter.info(f"convert: {fmt.name} needs no calibration; --calib-data is not used.")

    check_hub_model_fits(spec, convert_job(spec, fmt, kv, dtype, calibration))
    hf_dir, model = resolve_source(spec, reporter)
    hf_config = read_hf_config(hf_dir)
    decoder_type = check_architecture(hf_config, hf_dir)
    if checkpoint_format == HF_FORMAT:
        hf_export.check_architecture(architecture_of(hf_config) or "", hf_dir)
    rope = resolved_rope(hf_dir, hf_config)
    if checkpoint_format == TRTLLM_FORMAT:  # what TensorRT-LLM's checkpoint classes reject
        preflight(architecture_of(hf_config) or "", hf_config, rope)
    check_parallel(hf_config, spec.tp, spec.pp)
    lora_refs, lora_shape = adapters_for_checkpoint(list(spec.lora), hf_config, dtype, checkpoint_format)
    awq_block = None
    if "awq" in fmt.name:
        awq_block = choose_awq_block(linear_in_features(hf_config), spec.tp)

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
        "modelopt": package_version("nvidia-modelopt"),
    }
    if lora_refs:  # absent without adapters, so checkpoint ids stay as they were
        inputs["lora"] = adapters_identity(lora_refs)
    if checkpoint_format == HF_FORMAT:  # absent = trtllm, so trtllm checkpoint ids stay as they were
        inputs.update({"format": HF_FORMAT, "hf_export": hf_export.HF_EXPORT_VERSION})
    inputs_hash = sha256_json(inputs)
    ckpt_id = (hf_export.checkpoint_id(fmt.name, kv.name, inputs_hash) if checkpoint_format == HF_FORMAT
               else checkpoint_id(fmt.name, kv.name, spec.tp, spec.pp, inputs_hash))
    out = stage_dir(model, "checkpoints", ckpt_id, root=spec.root)
    return ConvertDecisions(
        format=checkpoint_format, fmt=fmt, kv=kv, dtype=dtype, hf_dir=hf_dir, model=model, decoder_type=decoder_type, hf_config=hf_config, rope=rope,
        calibration=calibration, awq_block=awq_block, inputs=inputs, inputs_hash=inputs_hash, ckpt_id=ckpt_id, out=out,
        lora=lora_refs, lora_shape=lora_shape,
    )


def checkpoint_id(quant: str, kv_cache: str, tp: int, pp: int, inputs_hash: str) -> str:
    """Readable and unique: e.g. `fp8-kvfp8-tp1-1a2b3c4d`, `int4_awq-tp2-pp2-…`."""
    kv = "" if kv_cache == "auto" else f"-kv{kv_cache}"
    pp_part = "" if pp == 1 else f"-pp{pp}"
    return f"{quant}{kv}-tp{tp}{pp_part}-{inputs_hash[:8]}"



"""Jobs that chain the stages, each step the same library call its own command makes.

- demo: the whole job on the CPU with the demo model: download -> convert -> build -> render ->
  serve -> smoke -> stop.
- engine: what `make engine GPU=h100 MODEL=... QUANT=fp8` runs in the CI image: download ->
  convert -> (evaluate gate) -> build -> render; with --dry-run only the build plan, from the model's
  config.json alone (plan_input: nothing downloaded but that file, nothing converted).
- evaluation: `pipeline evaluate`, its figures recorded in a checkpoint's manifest (pass or fail).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from pipeline.build.speculative import SpeculativeSpec
from pipeline.core.artifacts import MANIFEST_NAME, read_manifest, write_json_atomic
from pipeline.core.deployable import DEFAULT_BACKEND, HF_FORMAT, PYTORCH_BACKEND, TRTLLM_FORMAT, Backend
from pipeline.core.errors import GateFailedError, InvalidInputError
from pipeline.planner import Goal
from pipeline.evaluate import evaluate
from pipeline.evaluate.gate import check_gate
from pipeline.evaluate.spec import DEFAULT_MAX_DELTA, EvaluateResult, EvaluateSpec
from pipeline.core.reporting import SILENT, Reporter
from pipeline.quantization.simulated import Variant


class DemoSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field("demo", description="download source (default: the bundled SmolLM2-135M-Instruct GGUF)")
    quant: str = "fp16"
    goal: Goal = "latency"
    ready_timeout_s: float = Field(600.0, gt=0)
    # An orderly stop is the models' unload (~5 s on 2 shared cores). A cancelled ensemble stream stays in
    # flight in Triton 2.51 and holds a stopping server for its whole exit timeout (Triton's default: 30 s).
    exit_timeout_s: int = Field(10, ge=0)
    root: Path | None = None


class EngineJobSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = "demo"
    gpu: str = "h100"
    quant: str = "fp8"
    kv_cache: str | None = None
    goal: Goal = "throughput"
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    evaluate: bool = False
    max_delta: float | None = Field(None, ge=0)
    dry_run: bool = False
    backend: Backend = DEFAULT_BACKEND
    root: Path | None = None
    slo: str | None = None  # the build's limits chosen for this SLO (pipeline/build/slo.py), at isl/osl
    isl: int | None = Field(None, ge=1)
    osl: int | None = Field(None, ge=1)
    speculative: SpeculativeSpec | None = None  # its draft is downloaded and converted like the model
    lora: tuple[str, ...] = ()  # [NAME=]PATH of each PEFT adapter the build serves (pipeline/build/lora_build.py)


class JobStep(BaseModel):
    """One finished step of a job (download, convert, build, render, serve, smoke...): what it made and how long it took."""

    name: str
    seconds: float
    artifact: str
    detail: str = ""


class DemoResult(BaseModel):
    steps: list[JobStep]
    passed: bool
    smoke: dict[str, Any]
    prompt: str = ""
    answer: str | None = None  # the model's greedy answer to prompt (None when the smoke got none)

    @property
    def total_s(self) -> float:
        return round(sum(step.seconds for step in self.steps), 1)


class EngineJobResult(BaseModel):
    steps: list[JobStep]
    engine_dir: Path | None
    repo: Path | None

    @property
    def total_s(self) -> float:
        return round(sum(step.seconds for step in self.steps), 1)


class _Steps:
    """Times steps and reports each as it ends."""

    def __init__(self, on_step: Callable[[JobStep], None] | None) -> None:
        self.steps: list[JobStep] = []
        self._on_step = on_step

    def record(self, name: str, started: float, artifact: Path | str, detail: str = "") -> None:
        step = JobStep(name=name, seconds=round(time.perf_counter() - started, 2), artifact=str(artifact), detail=detail)
        self.steps.append(step)
        if self._on_step:
            self._on_step(step)


def run_engine_job(
    spec: EngineJobSpec, on_step: Callable[[JobStep], None] | None = None, reporter: Reporter = SILENT
) -> EngineJobResult:
    """download -> convert -> (evaluate) -> build -> render for one GPU; the CPU gets the reference runtime.
    on_step hears of each step as it ends; reporter gets the stages' progress and events."""
    from pipeline.build import BuildSpec, build_engine
    from pipeline.convert import ConvertSpec, convert
    from pipeline.core.gpus import check_precision, check_pytorch_precision, get_gpu
    from pipeline.core.quant import kv_cache_format, quant_format
    from pipeline.render import RenderSpec, render

    gpu = get_gpu(spec.gpu)  # refuse an unknown GPU or an impossible precision before any work
    check = check_pytorch_precision if spec.backend == PYTORCH_BACKEND and not gpu.is_cpu else check_precision
    check(gpu, quant_format(spec.quant), kv_cache_format(spec.kv_cache))
    steps = _Steps(on_step)
    if spec.dry_run:
        return _dry_run(spec, steps)

    t = time.perf_counter()
    downloaded = fetch_model(spec.source, spec.root, reporter)
    steps.record("download", t, downloaded.path, "reused" if downloaded.skipped else f"{downloaded.bytes / 2**20:.0f} MiB")

    t = time.perf_counter()
    # The PyTorch backend loads one HF checkpoint and shards it at load time: tp and pp go to build, not convert.
    pytorch = spec.backend == PYTORCH_BACKEND
    checkpoint = convert(ConvertSpec(model=str(downloaded.path), quant=spec.quant, kv_cache=spec.kv_cache,
                                     tp=1 if pytorch else spec.tp, pp=1 if pytorch else spec.pp, gpu=gpu.key, root=spec.root,
                                     format=HF_FORMAT if pytorch else TRTLLM_FORMAT), reporter)
    steps.record("convert", t, checkpoint.path, ("reused " if checkpoint.skipped else "")
                 + f"{checkpoint.quant_algo or checkpoint.dtype}, KV {checkpoint.kv_cache_quant_algo or checkpoint.dtype}, {checkpoint.ranks} rank(s)")

    if spec.evaluate:
        t = time.perf_counter()
        result = run_evaluation(EvaluateSpec(model=str(downloaded.path),
                                             variants=(Variant(quant=spec.quant, kv_cache=spec.kv_cache or "auto"),),
                                             max_delta=DEFAULT_MAX_DELTA if spec.max_delta is None else spec.max_delta),
                                record_in=checkpoint.path, reporter=reporter)
        row = result.formats[0]
        steps.record("evaluate", t, result.report_dir,
                     f"perplexity {result.baseline.perplexity:.2f} -> {row.perplexity:.2f} ({row.delta:+.1%})")
        check_gate(result)

    speculative = _draft_job(spec, gpu, reporter, steps) if spec.speculative and spec.speculative.draft else spec.speculative
    # The reference runtime serves the HF weights with the precision simulated; a GPU engine is built from
    # the TensorRT-LLM checkpoint (which carries its precision).
    # A PyTorch-backend deployable is made from the HF checkpoint on either (the CPU one links its 16-bit source).
    # the SLO's limits, and the adapters: the build reads the PEFT folders and writes them in its runtime's format
    options = {"slo": spec.slo, "slo_isl": spec.isl, "slo_osl": spec.osl} if spec.slo else {}
    options["lora"] = spec.lora
    if pytorch:
        build_spec = BuildSpec(gpu=gpu.key, checkpoint=checkpoint.path, goal=spec.goal, tp=spec.tp, pp=spec.pp, backend=PYTORCH_BACKEND,
                               speculative=speculative, **options)
    elif gpu.is_cpu:
        build_spec = BuildSpec(gpu=gpu.key, checkpoint=downloaded.path, quant=spec.quant, kv_cache=spec.kv_cache,
                               goal=spec.goal, speculative=speculative, **options)
    else:
        build_spec = BuildSpec(gpu=gpu.key, checkpoint=checkpoint.path, goal=spec.goal, speculative=speculative, **options)
    t = time.perf_counter()
    built = build_engine(build_spec, reporter)
    engine_dir = built.output_dir
    steps.record("build", t, engine_dir, f"{built.plan.profile_name}{' (cached)' if built.cached else ''}")

    t = time.perf_counter()
    repo = render(RenderSpec(engine=engine_dir))
    steps.record("render", t, repo.repo, f"{len(repo.models)} models, runtime {repo.runtime}")
    return EngineJobResult(steps=steps.steps, engine_dir=engine_dir, repo=repo.repo)


def _draft_job(spec: EngineJobSpec, gpu: Any, reporter: Reporter, steps: _Steps) -> SpeculativeSpec:
    """The draft model, downloaded and converted as the model is (its HF folder for the CPU engine layout, the
    converted checkpoint otherwise): the speculative spec with --draft pointing at it."""
    from pipeline.convert import ConvertSpec, convert

    assert spec.speculative is not None and spec.speculative.draft
    t = time.perf_counter()
    downloaded = fetch_model(spec.speculative.draft, spec.root, reporter)
    steps.record("download draft", t, downloaded.path, "reused" if downloaded.skipped else f"{downloaded.bytes / 2**20:.0f} MiB")
    if gpu.is_cpu and spec.backend != PYTORCH_BACKEND:
        return spec.speculative.model_copy(update={"draft": str(downloaded.path)})
    t = time.perf_counter()
    pytorch = spec.backend == PYTORCH_BACKEND
    converted = convert(ConvertSpec(model=str(downloaded.path), quant=spec.quant, kv_cache=spec.kv_cache,
                                    tp=1 if pytorch else spec.tp, pp=1, gpu=gpu.key, root=spec.root,
                                    format=HF_FORMAT if pytorch else TRTLLM_FORMAT), reporter)
    steps.record("convert draft", t, converted.path, "reused" if converted.skipped else "converted")
    return spec.speculative.model_copy(update={"draft": str(converted.path)})


def _dry_run(spec: EngineJobSpec, steps: _Steps) -> EngineJobResult:
    """The build plan from the model's config.json alone, as `pipeline plan` plans: nothing is downloaded but that
    file (a hub id) and nothing is converted; the trtllm-build command names the checkpoint `convert` would write."""
    import tempfile

    from pipeline.build import BuildSpec, plan_build

    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pipeline-plan-") as scratch:
        folder, model, where = plan_input(spec.source, Path(scratch))
        steps.record("config.json", t, where, "planned from the model's configuration only (no weights, no convert)")
        t = time.perf_counter()
        pytorch = spec.backend == PYTORCH_BACKEND
        plan = plan_build(BuildSpec(gpu=spec.gpu, checkpoint=folder, model=model, quant=spec.quant, kv_cache=spec.kv_cache,
                                    goal=spec.goal, tp=spec.tp, pp=spec.pp, backend=spec.backend,
                                    speculative=spec.speculative, slo=spec.slo, slo_isl=spec.isl, slo_osl=spec.osl,
                                    lora=spec.lora))
    if pytorch:
        options = plan.options
        detail = (f"{plan.profile_name}: max_batch_size {options['max_batch_size']}, "
                  f"max_num_tokens {options['max_num_tokens']}, max_seq_len {options['max_seq_len']}")
    else:
        detail = plan.command_line or plan.profile_name
    steps.record("build (dry run)", t, plan.output_dir, detail)
    return EngineJobResult(steps=steps.steps, engine_dir=None, repo=None)


def plan_input(source: str, scratch: Path) -> tuple[Path, str, str]:
    """(a folder holding the model's config.json, the model name, where the config came from) for SOURCE: a local
    folder as it is; a hub id's config.json alone (huggingface_hub.hf_hub_download); a GGUF file's configuration read
    from its metadata (transformers' AutoConfig with gguf_file), written to scratch. No weights are read."""
    import json

    from pipeline.hf.sources import parse_source
    from pipeline.core.paths import model_slug

    folder = Path(source[len("local:"):] if source.startswith("local:") else source).expanduser()
    made_by = (read_manifest(folder) or {}) if folder.is_dir() else {}
    if made_by.get("stage") == "download" and isinstance(made_by.get("model"), str):
        return folder.resolve(), model_slug(made_by["model"]), str(folder / "config.json")
    if folder.is_dir():  # as `pipeline plan` reads a folder: its config.json, weights or not
        if not (folder / "config.json").is_file():
            raise InvalidInputError(f"{folder} has no config.json to plan from.", hint="Give an HF model folder.")
        return folder.resolve(), model_slug(folder.resolve().name), str(folder / "config.json")
    parsed = parse_source(source)
    if parsed.kind == "hf":
        from huggingface_hub import hf_hub_download

        try:
            path = hf_hub_download(parsed.location, "config.json", revision=parsed.revision, local_dir=scratch)
        except Exception as error:  # offline, gated, missing: the hub's own reason
            raise InvalidInputError(f"Cannot fetch config.json of {parsed.location}: {error}",
                                    hint="Check the id and your network or token, or plan from a local folder.") from None
        return Path(path).parent, parsed.model, f"{parsed.display} config.json"
    from transformers import AutoConfig

    gguf = Path(parsed.location)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False).to_dict()
    config.pop("quantization_config", None)  # the plan's precision is --quant; the GGUF's own is not carried over
    (scratch / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return scratch, parsed.model, f"{parsed.display} (GGUF metadata)"


class FetchedModel(BaseModel):
    path: Path
    model: str
    bytes: int
    skipped: bool


def fetch_model(source: str, root: Path | None, reporter: Reporter = SILENT) -> FetchedModel:
    """`download` of SOURCE; a folder `pipeline download` already wrote (`local:build/<model>/hf`) is used in
    place under the model name its manifest records, not copied to a model named after the folder ("hf")."""
    from pipeline.core.artifacts import is_up_to_date
    from pipeline.download import DownloadSpec, download
    from pipeline.core.paths import model_slug

    folder = Path(source[len("local:"):] if source.startswith("local:") else source).expanduser()
    made_by = (read_manifest(folder) or {}) if folder.is_dir() else {}
    if made_by.get("stage") == "download" and isinstance(made_by.get("model"), str):
        if not is_up_to_date(folder, str(made_by.get("inputs_hash"))):
            raise InvalidInputError(f"{folder} no longer matches its manifest (a file changed or is missing).",
                                    hint=f"Download it again: pipeline download {made_by.get('source', 'SOURCE')}")
        files = made_by.get("files") or {}
        return FetchedModel(path=folder.resolve(), model=model_slug(made_by["model"]), skipped=True,
                            bytes=sum(int(meta.get("size", 0)) for meta in files.values()))
    result = download(DownloadSpec(source=source, root=root), reporter)
    return FetchedModel(path=result.path, model=result.model, bytes=result.bytes, skipped=result.skipped)


def run_demo(spec: DemoSpec, on_step: Callable[[JobStep], None] | None = None, reporter: Reporter = SILENT) -> DemoResult:
    from pipeline.serve import ServerSpec, start_server
    from pipeline.smoke import SmokeSpec, run_smoke

    built = run_engine_job(EngineJobSpec(source=spec.source, gpu="cpu", quant=spec.quant, goal=spec.goal, root=spec.root),
                           on_step=on_step, reporter=reporter)
    steps = _Steps(on_step)
    steps.steps = list(built.steps)
    repo = built.repo
    assert repo is not None  # not a dry run

    t = time.perf_counter()
    log_file = repo.parent / f"{repo.name}.server.log"
    server_spec = ServerSpec(repo=repo, log_file=log_file, ready_timeout_s=spec.ready_timeout_s,
                             exit_timeout_s=spec.exit_timeout_s)
    with start_server(server_spec) as server:
        steps.record("serve", t, server.log_file, f"ready on grpc {server.grpc_url}")
        t = time.perf_counter()
        report = run_smoke(SmokeSpec(url=server.grpc_url))
        failed = [c.name for c in report.checks if not c.passed]
        steps.record("smoke", t, server.grpc_url, f"{len(report.checks) - len(failed)}/{len(report.checks)} passed"
                     + (f"; failed: {', '.join(failed)}" if failed else ""))
        t = time.perf_counter()
    steps.record("stop", t, "", f"server stopped (exit code {server.process.returncode})")
    return DemoResult(steps=steps.steps, passed=report.passed, smoke=report.model_dump(mode="json"),
                      prompt=report.prompt, answer=report.answer)


def require_demo_pass(result: DemoResult) -> None:
    if not result.passed:
        failed = [c["name"] for c in result.smoke["checks"] if not c["passed"]]
        raise GateFailedError(f"The demo's smoke checks failed: {', '.join(failed)}.",
                              hint="Read the server log named in the 'serve' row.")


def checkpoint_manifest(checkpoint_dir: Path) -> dict[str, Any]:
    """checkpoint_dir's manifest, or InvalidInputError (checked before a long evaluation starts)."""
    manifest = read_manifest(Path(checkpoint_dir))
    if manifest is None:
        raise InvalidInputError(
            f"{checkpoint_dir} has no readable {MANIFEST_NAME}.",
            hint="Give a checkpoint folder made by `pipeline convert` (build/<model>/checkpoints/<id>).",
        )
    return manifest


def record_in_manifest(checkpoint_dir: Path, result: EvaluateResult) -> dict[str, Any]:
    """Add the figures under "evaluation" in checkpoint_dir/manifest.json (the file inventory and
    inputs hash are untouched, so the checkpoint stays up to date). Returns what was recorded."""
    checkpoint_dir = Path(checkpoint_dir)
    manifest = checkpoint_manifest(checkpoint_dir)
    ours = result.dataset.get("calibration_sha256")
    theirs = (manifest.get("calibration") or {}).get("sha256")
    record = {
        "passed": result.passed,
        "max_delta": result.max_delta,
        "failed": list(result.failed),
        "dataset": {k: result.dataset[k] for k in ("name", "sha256", "texts", "tokens")},
        "baseline": {"dtype": result.baseline.quant, "perplexity": result.baseline.perplexity},
        "formats": {
            row.name: {
                "perplexity": row.perplexity,
                "delta": row.delta,
                "top1_agreement": row.top1_agreement,
                "kv_measured": row.kv_measured,
                "passed": row.passed,
            }
            for row in result.formats
        },
        "report_dir": str(result.report_dir),
        "inputs_hash": result.inputs_hash,
        # True: the figures come from the same calibration texts that made this checkpoint
        "calibration_matches_checkpoint": None if not (ours and theirs) else ours == theirs,
    }
    manifest["evaluation"] = record
    write_json_atomic(checkpoint_dir / MANIFEST_NAME, manifest)
    return record


def run_evaluation(
    spec: EvaluateSpec, *, record_in: Path | None = None, reporter: Reporter = SILENT
) -> EvaluateResult:
    """`evaluate`, then, given a checkpoint folder, its figures recorded in that folder's manifest,
    pass or fail (a folder without a manifest is refused before the long run). The gate is the
    caller's: `pipeline.evaluate.gate.check_gate` after the result is shown."""
    if record_in is not None:
        checkpoint_manifest(record_in)
    result = evaluate(spec, reporter)
    if record_in is not None:
        record_in_manifest(record_in, result)
        reporter.info(f"recorded the figures in {Path(record_in) / MANIFEST_NAME}")
    return result

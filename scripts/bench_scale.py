"""How convert's cost grows with the model: the demo (SmolLM2-135M) and a Llama-shaped model of about
1B parameters with random weights and the demo's tokenizer (pipeline.hf.scale: Llama 3.2 1B's layers,
the demo's 49152-token vocabulary, 1.07B parameters), measured in one run on this machine:

- convert (`--device auto`: the GPUs where there are any) for each format, wall time and peak RSS,
  each in a fresh child process, beside what the memory pre-check and the CPU time estimate said;
- the no-op re-run of the same convert (the size/mtime fast path);
- render: `build --gpu cpu` (the reference engine, HF weights hard-linked) and `render`.

It prints time per billion parameters and peak RSS over the weight bytes (at the load dtype,
float16). Calibration is kept small so the 1B model finishes on 2 cores (default 8 samples x 64
tokens, batch 4: two forward passes); the same settings for both models, so the ratios compare.
Everything goes under --root (default build/bench-scale): the demo is converted from its GGUF
once, the 1B model is written once (about 1 minute, 2 GiB) and both are reused by later runs.
Writes <root>/reports/bench-scale.json.

    .venv/bin/python scripts/bench_scale.py                 # make bench-scale
    .venv/bin/python scripts/bench_scale.py --formats fp16 --calib-size 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

GIB = float(1 << 30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="build/bench-scale", help="build root for the models and checkpoints")
    parser.add_argument("--formats", default="fp16,fp8", help="--quant formats to convert, comma-separated")
    parser.add_argument("--calib-size", type=int, default=8)
    parser.add_argument("--calib-max-len", type=int, default=64)
    parser.add_argument("--models", default="demo,1b", help="demo and/or 1b")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--hf-dir", help=argparse.SUPPRESS)
    parser.add_argument("--quant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = Path(args.root).resolve()
    os.environ["PIPELINE_BUILD_DIR"] = str(root)
    if args.worker:
        return _worker(args)

    from pipeline.download import DownloadSpec, download

    started = time.time()
    demo = download(DownloadSpec(source="demo", root=root)).path
    folders = {"demo": demo}
    if "1b" in args.models.split(","):
        folders["1b"] = _scale_model(root, demo)
    runs = []
    for name, hf_dir in folders.items():
        if name not in args.models.split(","):
            continue
        for quant in [q for q in args.formats.split(",") if q]:
            runs.append(_child("convert", hf_dir, quant, args) | {"model": name})
        runs.append(_child("noop", hf_dir, args.formats.split(",")[0], args) | {"model": name})
        runs.append(_child("render", hf_dir, "fp16", args) | {"model": name})
    report = _report(runs, folders, args, time.time() - started)
    out = root / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-scale.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _print(report, out / "bench-scale.json")
    return 0


def _scale_model(root: Path, demo: Path) -> Path:
    """<root>/scale-llama-1b/hf: written once (random weights, the demo's tokenizer) through
    `pipeline download local:` so it has a manifest like any downloaded model."""
    from pipeline.core.artifacts import read_manifest
    from pipeline.download import DownloadSpec, download
    from pipeline.hf.scale import llama_1b_shape, write_random_llama

    target = root / "scale-llama-1b" / "hf"
    if (read_manifest(target) or {}).get("stage") == "download":
        return target
    vocab = json.loads((demo / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    staging = root / ".staging" / "scale-llama-1b"
    shutil.rmtree(staging, ignore_errors=True)
    print(f"writing a {llama_1b_shape(vocab).param_count / 1e9:.2f}B-parameter Llama with random weights -> {target}",
          file=sys.stderr, flush=True)
    write_random_llama(staging, llama_1b_shape(vocab), demo)
    download(DownloadSpec(source=f"local:{staging}", out=target))
    shutil.rmtree(staging.parent, ignore_errors=True)
    return target


def _child(what: str, hf_dir: Path, quant: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--worker", what, "--hf-dir", str(hf_dir), "--quant", quant, "--root", args.root,
               "--calib-size", str(args.calib_size), "--calib-max-len", str(args.calib_max_len)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} {quant} of {hf_dir} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    record = json.loads(done.stdout.strip().splitlines()[-1]) | {"process_s": round(time.perf_counter() - started, 2)}
    print(f"  {hf_dir.parent.name:24s} {what:7s} {quant:5s} {record['work_s']:8.1f} s  {record['peak_rss_mb']:7.0f} MiB peak",
          file=sys.stderr, flush=True)
    return record


def _worker(args: argparse.Namespace) -> int:
    """One measurement in this fresh process; prints one JSON line. work_s leaves out the imports."""
    import modelopt.torch.export  # noqa: F401  (imports are not part of the measured work)
    import modelopt.torch.quantization  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from pipeline.convert import ConvertSpec, convert, peak_rss_mb
    from pipeline.core.output import OUT

    OUT.quiet = True
    hf_dir = Path(args.hf_dir)
    spec = ConvertSpec(model=str(hf_dir), quant=args.quant, calib_size=args.calib_size, calib_max_len=args.calib_max_len)
    record: dict = {"what": args.worker, "quant": args.quant}
    started = time.perf_counter()
    if args.worker == "convert":
        result = convert(spec.model_copy(update={"force": True}))
        manifest = json.loads((result.path / "manifest.json").read_text(encoding="utf-8"))
        record |= {"device": result.device, "timings_s": manifest["timings_s"], "bytes": result.bytes,
                   "placement": manifest["placement"]}
    elif args.worker == "noop":
        result = convert(spec)
        if not result.skipped:
            raise SystemExit("the re-run was not a no-op")
    else:
        from pipeline.build import BuildSpec, build_engine
        from pipeline.render import RenderSpec, render

        engine = build_engine(BuildSpec(gpu="cpu", checkpoint=hf_dir, force=True))
        repo = render(RenderSpec(engine=engine.engine_dir, force=True))
        record |= {"build_s": engine.duration_s, "repo": str(repo.repo)}
    record |= {"work_s": round(time.perf_counter() - started, 3), "peak_rss_mb": peak_rss_mb()}
    print(json.dumps(record))
    return 0


def _report(runs: list[dict], folders: dict[str, Path], args: argparse.Namespace, total_s: float) -> dict:
    import platform

    from pipeline.core.artifacts import tool_versions
    from pipeline.planner import model_spec_from_config

    models = {}
    for name, hf_dir in folders.items():
        params = model_spec_from_config(hf_dir).param_count
        models[name] = {"hf_dir": str(hf_dir), "params": params, "weight_bytes_float16": params * 2}
    for run in runs:
        model = models[run["model"]]
        run["s_per_b_params"] = round(run["work_s"] / (model["params"] / 1e9), 2)
        run["rss_over_weights"] = round(run["peak_rss_mb"] * (1 << 20) / model["weight_bytes_float16"], 2)
        if run["what"] == "convert":
            placement = run["placement"]
            run["estimate_s"] = placement.get("estimate_s")
            run["needed_gib"] = placement["needed_gib"].get("cpu")
    return {
        "models": models, "runs": runs, "calib_size": args.calib_size, "calib_max_len": args.calib_max_len,
        "calib_batch_size": 4, "total_s": round(total_s, 1),
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "platform": platform.platform()},
        "tool_versions": tool_versions("nvidia-modelopt", "torch", "transformers"), "created_unix": time.time(),
    }


def _print(report: dict, path: Path) -> None:
    print(f"{'model':6s} {'params':>7s} {'step':13s} {'device':6s} {'time s':>8s} {'s/B params':>10s} {'peak RSS GiB':>12s} "
          f"{'RSS/weights':>11s} {'pre-check GiB':>13s} {'estimate s':>10s}")
    for run in report["runs"]:
        model = report["models"][run["model"]]
        step = f"{run['what']} {run['quant']}" if run["what"] != "render" else "build+render"
        print(f"{run['model']:6s} {model['params'] / 1e9:6.2f}B {step:13s} {run.get('device') or '':6s} {run['work_s']:8.1f} "
              f"{run['s_per_b_params']:10.1f} {run['peak_rss_mb'] / 1024:12.2f} {run['rss_over_weights']:11.2f} "
              f"{run.get('needed_gib') or '':>13} {run.get('estimate_s') or '':>10}")
    print(f"calibration {report['calib_size']} x {report['calib_max_len']} tokens, batch 4; {report['machine']['cpus']} CPUs, "
          f"load average {report['machine']['load_avg_1m_at_end']} at the end; {report['total_s']:.0f} s in all -> {path}")


if __name__ == "__main__":
    raise SystemExit(main())

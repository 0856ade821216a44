"""Wall time and peak memory of `convert` for each format on one model, and the ratio of the fp16
convert to a plain transformers load + safetensors save of the same weights, measured in one run.

Each measurement runs in a fresh child process (so its peak RSS is its own); the fp16 convert and
the plain baseline alternate `--repeats` times and their medians make the ratio. Checkpoints go to a
temporary build root, so existing artifacts are left alone. Writes
build/<model>/reports/convert-bench.json and convert-bench.png.

    .venv/bin/python scripts/bench_convert.py                      # the demo model, default formats
    .venv/bin/python scripts/bench_convert.py --formats fp16,fp8 --calib-size 16
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FORMATS = ("fp16", "fp8+fp8", "int8_sq", "int8_wo", "int4_wo", "int4_awq")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="download source or HF folder (default: demo)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="QUANT or QUANT+KV, comma-separated")
    parser.add_argument("--calib-size", type=int, default=16)
    parser.add_argument("--calib-max-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="runs of the fp16 convert and of the baseline")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--hf-dir", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)

    from pipeline.download import DownloadSpec, download
    from pipeline.core.paths import stage_dir

    hf_dir, model = _hf_dir(args.model, DownloadSpec, download)
    formats = [f for f in args.formats.split(",") if f]
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-convert-") as root:
        for repeat in range(args.repeats):  # alternate, so drift in machine load hits both alike
            runs.append(_child("baseline", hf_dir, root, args) | {"repeat": repeat})
            runs.append(_child("fp16", hf_dir, root, args) | {"repeat": repeat})
        for fmt in formats:
            if fmt != "fp16":
                runs.append(_child(fmt, hf_dir, root, args) | {"repeat": 0})
    report = _summarise(runs, model, hf_dir, args)
    out = stage_dir(model, "reports")
    out.mkdir(parents=True, exist_ok=True)
    (out / "convert-bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _plot(report, out / "convert-bench.png")
    _print(report, out)
    return 0


def _hf_dir(source: str, spec_cls, download) -> tuple[Path, str]:
    folder = Path(source).expanduser()
    if folder.is_dir():
        return folder.resolve(), folder.name
    result = download(spec_cls(source=source))
    return Path(result.path), result.model


def _child(what: str, hf_dir: Path, root: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--worker", what, "--hf-dir", str(hf_dir), "--root", root,
               "--calib-size", str(args.calib_size), "--calib-max-len", str(args.calib_max_len)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    record["process_s"] = round(process_s, 3)
    print(f"  {what:10s} {record['work_s']:7.1f} s work  {record['process_s']:7.1f} s process  "
          f"{record['peak_rss_mb']:7.0f} MiB peak", file=sys.stderr, flush=True)
    return record


def _worker(args: argparse.Namespace) -> int:
    """One measurement in this (fresh) process; prints one JSON line. work_s excludes imports."""
    import torch  # noqa: F401  (imports are not part of the measured work)
    import transformers  # noqa: F401

    what = args.worker
    if what == "baseline":
        from safetensors.torch import save_model
        from transformers import AutoModelForCausalLM

        started = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float16, trust_remote_code=False)
        out = Path(args.root) / "baseline"
        out.mkdir(parents=True, exist_ok=True)
        save_model(model, str(out / "model.safetensors"))  # handles the tied embedding
        work_s = time.perf_counter() - started
        record = {"what": "baseline", "bytes": (out / "model.safetensors").stat().st_size}
    else:
        import modelopt.torch.export  # noqa: F401

        from pipeline.convert import ConvertSpec, convert
        from pipeline.core.output import OUT

        OUT.quiet = True
        quant, _, kv = what.partition("+")
        started = time.perf_counter()
        result = convert(ConvertSpec(model=args.hf_dir, quant=quant, kv_cache=kv or None, root=Path(args.root), force=True,
                                     calib_size=args.calib_size, calib_max_len=args.calib_max_len))
        work_s = time.perf_counter() - started
        manifest = json.loads((result.path / "manifest.json").read_text(encoding="utf-8"))
        record = {"what": what, "bytes": result.bytes, "quant_algo": result.quant_algo,
                  "kv_cache_quant_algo": result.kv_cache_quant_algo, "timings_s": manifest.get("timings_s")}
    record |= {"work_s": round(work_s, 3), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    print(json.dumps(record))
    return 0


def _summarise(runs: list[dict], model: str, hf_dir: Path, args: argparse.Namespace) -> dict:
    import os
    import platform

    from pipeline.core.artifacts import tool_versions

    def median(what: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs if r["what"] == what), 3)

    formats = []
    for what in dict.fromkeys(r["what"] for r in runs):
        mine = [r for r in runs if r["what"] == what]
        formats.append({
            "format": what,
            "work_s": median(what, "work_s"),
            "process_s": median(what, "process_s"),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
            "output_mib": round(mine[0]["bytes"] / (1 << 20), 1),
            "quant_algo": mine[0].get("quant_algo"),
            "kv_cache_quant_algo": mine[0].get("kv_cache_quant_algo"),
            "timings_s": mine[0].get("timings_s"),
            "runs": len(mine),
        })
    return {
        "model": model,
        "hf_dir": str(hf_dir),
        "calib_size": args.calib_size,
        "calib_max_len": args.calib_max_len,
        "repeats": args.repeats,
        "fp16_over_baseline_work": round(median("fp16", "work_s") / median("baseline", "work_s"), 2),
        "fp16_over_baseline_process": round(median("fp16", "process_s") / median("baseline", "process_s"), 2),
        "formats": formats,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "platform": platform.platform()},
        "tool_versions": tool_versions("nvidia-modelopt", "torch", "transformers"),
        "created_unix": time.time(),
    }


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.core.figures import write_figure_atomic

    names = [f["format"] for f in report["formats"]]
    colors = ["#999999" if n == "baseline" else "#76b900" for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.bar(names, [f["work_s"] for f in report["formats"]], color=colors)
    left.set_ylabel("wall time, s (imports excluded)")
    left.set_title(f"convert time; fp16 / plain load+save = {report['fp16_over_baseline_work']}x")
    right.bar(names, [f["peak_rss_mb"] for f in report["formats"]], color=colors)
    right.set_ylabel("peak RSS, MiB")
    right.set_title("peak memory (whole process)")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=30)
    fig.suptitle(f"{report['model']}: ModelOpt convert on the CPU (calib {report['calib_size']} x {report['calib_max_len']} tokens)")
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=120)


def _print(report: dict, out: Path) -> None:
    print(f"{'format':10s} {'work s':>8s} {'process s':>10s} {'peak MiB':>9s} {'out MiB':>8s}")
    for f in report["formats"]:
        print(f"{f['format']:10s} {f['work_s']:8.1f} {f['process_s']:10.1f} {f['peak_rss_mb']:9.0f} {f['output_mib']:8.1f}")
    print(f"fp16 convert / plain load+save: {report['fp16_over_baseline_work']}x (work), "
          f"{report['fp16_over_baseline_process']}x (whole process)")
    print(f"-> {out / 'convert-bench.json'}, {out / 'convert-bench.png'}")


if __name__ == "__main__":
    raise SystemExit(main())

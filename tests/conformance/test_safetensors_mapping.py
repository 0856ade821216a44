"""What `safetensors.torch.load_file` costs a TensorRT-LLM rank, measured: the fact the PyTorch-backend pod
sizing rests on (pipeline/k8s/layout.py, PYTORCH_LOADER_FACTOR).

TensorRT-LLM 1.1's HfWeightLoader calls load_file on every checkpoint file in every rank. If load_file copied
the tensors into private memory, each rank would hold the whole checkpoint and a pod would need world_size
times its size; it maps the file instead, so the ranks share the page cache. Run in a fresh interpreter, so
nothing else moves its memory counters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import json, sys
import safetensors, safetensors.torch, torch

def counters():
    values = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            values[key] = int(value.split()[0]) * 1024
    return values

before = counters()
weights = safetensors.torch.load_file(sys.argv[1])
total = sum(float(t.float().sum()) for t in weights.values())  # touches every page
after = counters()
pointer = next(iter(weights.values())).data_ptr()
mapping = ""
for line in open("/proc/self/maps"):
    start, end = (int(x, 16) for x in line.split()[0].split("-"))
    if start <= pointer < end:
        mapping = line.strip()
print(json.dumps({"before": before, "after": after, "mapping": mapping, "safetensors": safetensors.__version__,
                  "torch": torch.__version__}))
"""


def test_load_file_maps_the_file_and_copies_nothing(tmp_path: Path) -> None:
    import safetensors.torch
    import torch

    path = tmp_path / "model-00001-of-00001.safetensors"
    # 8 tensors of 16 MiB in fp16 (128 MiB): far above the interpreter's own noise
    safetensors.torch.save_file({f"layers.{i}.weight": torch.ones(4096, 2048, dtype=torch.float16) for i in range(8)},
                                str(path))
    size = path.stat().st_size
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=300,
                          check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    anon = seen["after"]["RssAnon"] - seen["before"]["RssAnon"]
    file_backed = seen["after"]["RssFile"] - seen["before"]["RssFile"]
    # the tensors are views into a private (copy-on-write) mapping of the file itself ...
    fields = seen["mapping"].split()
    assert fields and fields[1].startswith("rw-p") and fields[-1] == str(path), seen
    # ... whose pages are the file's (page cache, shared between processes), not private copies
    assert file_backed >= 0.9 * size, seen
    assert anon < 0.25 * size, seen

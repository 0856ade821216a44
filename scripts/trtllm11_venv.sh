#!/usr/bin/env bash
# A second virtual environment with TensorRT-LLM 1.1's transformers 4.57.1 and ModelOpt 0.37
# (tests/conformance/trtllm-1.1-requirements.txt), for the tests that read our artifacts under both
# transformers generations. Idempotent: a stamp named after the pins' hash marks a finished
# install; concurrent callers wait on a lock. About 40 s with a warm pip cache (was 75 s before --no-compile).
#
#   scripts/trtllm11_venv.sh [DIR]        (default build/.venv-trtllm-1.1; prints DIR/bin/python)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/build/.venv-trtllm-1.1}"
req="$root/tests/conformance/trtllm-1.1-requirements.txt"
python="${PYTHON:-python3}"
stamp="$dir/.installed-$(grep -v '^#' "$req" | sha256sum | cut -c1-12)"  # the pins, not the comments
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$stamp" ]; then
    rm -rf "$dir"
    "$python" -m venv "$dir"
    # --no-compile: no .pyc for the thousands of modules (torch, transformers' every model, scipy) the probes
    # never import; the ones they import are compiled on first import and cached in the venv as usual.
    "$dir/bin/python" -m pip install -q --no-compile torch==2.13.0 >&2
    "$dir/bin/python" -m pip install -q --no-compile -r "$req" >&2
    touch "$stamp"
fi
echo "$dir/bin/python"

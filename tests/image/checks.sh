#!/usr/bin/env bash
# The checks inside the built image, run by scripts/image_test.sh as uid 10001 in /workspace/pipeline, with
# the stand-in nvidia-smi (one H100) mounted at /usr/bin/nvidia-smi and this folder at /check.
#
# Every process that runs NVIDIA code must run under the image's own Python (prefix /usr) with TensorRT-LLM
# 1.1.0's transformers 4.57.1, never the pipeline's /opt/pipeline: each says so itself, in its log:
# the Python-backend stubs (preprocessing, postprocessing, BLS, the LLM-API model) through the line their
# initialize writes, the stand-in trtllm-build / trtllm-serve / mpirun through their own report. The CPU
# reference runtime is the one server that must get the pipeline's packages.
set -uo pipefail
export COLUMNS=200  # rich wraps tables to the terminal, 80 columns without one
out=/check/out
mkdir -p "$out"
model=/workspace/build/models/tiny-llama
failed=0
NVIDIA_ENV="python prefix /usr, transformers 4\.57\.1"
PIPELINE_ENV="python prefix /opt/pipeline, transformers 5\."

pass() { printf 'PASS  %s\n' "$1"; }
fail() { printf 'FAIL  %s\n' "$1"; [ -n "${2:-}" ] && [ -f "$2" ] && tail -n 40 "$2" | sed 's/^/      | /'; failed=$((failed + 1)); }

# newest KIND: the folder `make engine` wrote last under build/<model>/KIND/ (folders are named by profile id)
newest() { ls -td /workspace/build/*/"$1"/*/ 2> /dev/null | head -n 1; }

# run NAME CMD...: the command must exit 0 (output in $out/NAME.log)
run() {
    local name=$1; shift
    if "$@" > "$out/$name.log" 2>&1; then pass "$name"; else fail "$name (exit $?)" "$out/$name.log"; fi
}

# expect NAME FILE PATTERN: FILE has a line matching PATTERN (extended regex)
expect() {
    if grep -Eq -e "$3" "$2" 2> /dev/null; then pass "$1"; else fail "$1: no line /$3/ in $2" "$2"; fi
}

# serve NAME READY ARGS...: `pipeline serve ARGS` in the background until it prints its ready line (READY=1) or
# exits (READY=0: a start that must fail, after its models have logged); tritonserver's log is $out/NAME.server.log
serve() {
    local name=$1 want_ready=$2; shift 2
    pipeline serve "$@" --json --log-file "$out/$name.server.log" > "$out/$name.serve.log" 2>&1 &
    local pid=$! ready=0
    for _ in $(seq 1 240); do
        if grep -q '"log_file"' "$out/$name.serve.log" 2> /dev/null; then ready=1; break; fi
        kill -0 "$pid" 2> /dev/null || break
        sleep 1
    done
    kill -TERM "$pid" 2> /dev/null  # not INT: a script's background jobs ignore SIGINT
    wait "$pid" 2> /dev/null
    if [ "$ready" = "$want_ready" ]; then pass "$name: serve ready=$ready"; else fail "$name: serve ready=$ready, expected $want_ready" "$out/$name.serve.log"; fi
}

id -u | grep -qx 10001 && pass "runs as uid 10001" || fail "runs as uid $(id -u), not 10001"
run doctor pipeline doctor
expect "doctor sees the (stand-in) H100" "$out/doctor.log" "H100"
run tiny-model /opt/pipeline/bin/python /check/make_tiny_model.py "$model"

# 1. the plan alone
run dry-run make engine GPU=h100 MODEL="$model" QUANT=fp8 DRY_RUN=1
expect "dry run prints the trtllm-build command" "$out/dry-run.log" "--checkpoint_dir"
run plan-by-name make plan PLAN_MODEL=llama-3.1-70b GPU=h100 QUANT=fp8 TP=2 PP=2
expect "make plan sizes a shipped model by name from the installed package" "$out/plan-by-name.log" "llama-3\.1-70b: 70\.554 B params"

# 2. an engine with the stand-in trtllm-build, rendered; tritonserver on it
run engine make engine GPU=h100 MODEL="$model" QUANT=fp8
engine_log="$(newest engines)/build.log"
expect "trtllm-build runs under the image's Python" "${engine_log:-/dev/null}" "trtllm-build \(stand-in\): $NVIDIA_ENV"
repo=$(newest triton)
serve engine-repo 1 "$repo" --no-warmup --exit-timeout 5 --http-port 0 --grpc-port 0 --metrics-port 0
for kind in preprocessing postprocessing tensorrt_llm_bls; do
    expect "$kind stub runs under the image's Python" "$out/engine-repo.server.log" "$kind: $NVIDIA_ENV"
done
expect "the engine loads in the (stand-in) tensorrtllm backend" "$out/engine-repo.server.log" "tensorrtllm backend \(stand-in\): engine"

# 3. two ranks under mpirun
run engine-tp2 make engine GPU=h100 MODEL="$model" QUANT=fp8 TP=2
repo_tp2=$(newest triton)
serve engine-tp2 1 "${repo_tp2:-/nonexistent}" --world-size 2 --no-warmup --exit-timeout 5 --http-port 0 --grpc-port 0 --metrics-port 0
expect "mpirun's ranks get the image's Python" "$out/engine-tp2.server.log" "mpirun \(stand-in\): $NVIDIA_ENV"
expect "preprocessing under mpirun runs under the image's Python" "$out/engine-tp2.server.log" "preprocessing: $NVIDIA_ENV"

# 4. the PyTorch backend: the LLM-API model and trtllm-serve (both stop where a GPU is needed)
run pytorch make engine GPU=h100 MODEL="$model" QUANT=fp8 BACKEND=pytorch
llmapi_repo=$(newest triton)
serve llmapi 0 "${llmapi_repo:-/nonexistent}" --no-warmup --exit-timeout 5 --http-port 0 --grpc-port 0 --metrics-port 0
expect "the LLM-API model runs under the image's Python" "$out/llmapi.server.log" "llmapi tensorrt_llm: $NVIDIA_ENV"
deployable=$(newest engines)
serve trtllm-serve 0 --api openai "${deployable:-/nonexistent}" --http-port 0
expect "trtllm-serve runs under the image's Python" "$out/trtllm-serve.server.log" "trtllm-serve \(stand-in\): $NVIDIA_ENV"

# 5. the CPU reference runtime: the one server that needs the pipeline's own packages; smoke passes on it
run reference make engine GPU=cpu MODEL="$model" QUANT=fp16
reference_repo=$(newest triton)
serve reference 1 "${reference_repo:-/nonexistent}" --exit-timeout 5 --http-port 0 --grpc-port 0 --metrics-port 0
expect "the reference runtime gets the pipeline's packages" "$out/reference.server.log" "reference tensorrt_llm: $PIPELINE_ENV"

echo
if [ "$failed" -eq 0 ]; then echo "image checks: all passed"; else echo "image checks: $failed failed"; fi
exit $((failed > 0))

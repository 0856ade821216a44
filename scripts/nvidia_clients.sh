#!/usr/bin/env bash
# Run NVIDIA's own sample clients, unchanged, against our served repositories.
#
#   scripts/nvidia_clients.sh BACKEND_CHECKOUT DECOUPLED_GRPC NON_DECOUPLED_HTTP TOKENIZER_DIR [LORA_DIR TASK_ID]
#
# BACKEND_CHECKOUT: a checkout of triton-inference-server/tensorrtllm_backend (we ran c2e65b88); its code
# stays outside this project. DECOUPLED_GRPC: host:port of `pipeline serve` on a default (decoupled)
# repository; NON_DECOUPLED_HTTP: host:port (HTTP) of one rendered with --no-decoupled (NVIDIA's
# end_to_end_test uses that mode). The clients need pandas and tabulate besides our own dependencies.
# LORA_DIR: an adapter in TensorRT-LLM's format (model.lora_weights.npy + model.lora_config.npy, as
# pipeline.convert.lora writes it, in the engine's dtype); with it the clients also run with --lora-path and
# --lora-task-id, first sending the weights, then the id alone (TASK_ID, TASK_ID+1, TASK_ID+2: one per client).
# Exit status: the number of client runs that failed.
set -uo pipefail
backend=$1 grpc=$2 http=$3 tokenizer=$4 lora=${5:-} task=${6:-1}
python=${PYTHON:-python}
prompt="The capital of France is"
failed=0

run() {  # name, command...
  local name=$1; shift
  # end_to_end_grpc_client.py prints a server error and still exits 0: its output is checked too
  if output=$("$@" 2>&1) && ! grep -qE "Received an error from server|Traceback|Encountered error" <<<"$output"; then
    printf 'PASS  %s\n' "$name"
  else
    printf 'FAIL  %s\n%s\n' "$name" "$(tail -n 5 <<<"$output")"
    failed=$((failed + 1))
  fi
}

e2e="$backend/inflight_batcher_llm/client/end_to_end_grpc_client.py"
for model in ensemble tensorrt_llm_bls; do
  for mode in "" --streaming; do
    run "end_to_end_grpc_client $model $mode" "$python" "$e2e" -u "$grpc" --model-name "$model" -o 12 -p "$prompt" $mode
    run "end_to_end_grpc_client $model $mode log-probs+perf-metrics" "$python" "$e2e" -u "$grpc" --model-name "$model" \
      -o 12 -p "$prompt" $mode --return-log-probs --return-perf-metrics
    run "end_to_end_grpc_client $model $mode stop words" "$python" "$e2e" -u "$grpc" --model-name "$model" -o 12 \
      -p "$prompt" $mode --stop-words " answer" --exclude-input-in-output
    run "end_to_end_grpc_client $model $mode batch inputs" "$python" "$e2e" -u "$grpc" --model-name "$model" -o 12 \
      -p "[\"$prompt\", \"One, two, three,\"]" --batch-inputs $mode
  done
done

direct="$backend/inflight_batcher_llm/client/inflight_batcher_llm_client.py"
run "inflight_batcher_llm_client streaming" "$python" "$direct" -u "$grpc" --tokenizer-dir "$tokenizer" --text "$prompt" \
  --request-output-len 12 -S --return-log-probs --return-perf-metrics --exclude-input-in-output
run "inflight_batcher_llm_client stop via request cancel" "$python" "$direct" -u "$grpc" --tokenizer-dir "$tokenizer" \
  --text "$prompt" --request-output-len 200 -S --stop-via-request-cancel --stop-after-ms 300

if [[ -n $lora ]]; then
  run "inflight_batcher_llm_client LoRA weights" "$python" "$direct" -u "$grpc" --tokenizer-dir "$tokenizer" \
    --text "$prompt" --request-output-len 12 -S --lora-path "$lora" --lora-task-id "$task"
  run "inflight_batcher_llm_client LoRA id alone" "$python" "$direct" -u "$grpc" --tokenizer-dir "$tokenizer" \
    --text "$prompt" --request-output-len 12 -S --lora-task-id "$task"
  next=$task
  for model in ensemble tensorrt_llm_bls; do
    next=$((next + 1))
    run "end_to_end_grpc_client $model LoRA weights" "$python" "$e2e" -u "$grpc" --model-name "$model" -o 12 \
      -p "$prompt" --lora-path "$lora" --lora-task-id "$next"
    run "end_to_end_grpc_client $model LoRA id alone" "$python" "$e2e" -u "$grpc" --model-name "$model" -o 12 \
      -p "$prompt" --lora-task-id "$next"
  done
fi

dataset=$(mktemp --suffix=.json)
trap 'rm -f "$dataset"' EXIT
cat >"$dataset" <<'JSON'
[
 {"input": "The capital of France is", "instruction": "Answer in one word.", "output": "Paris is the capital"},
 {"input": "One, two, three,", "instruction": "Continue the count.", "output": "four, five, six, seven"},
 {"input": "Water boils at", "instruction": "Give the temperature.", "output": "one hundred degrees Celsius"}
]
JSON
test="$backend/tools/inflight_batcher_llm/end_to_end_test.py"
for extra in "" --return-log-probs --test-bls; do
  run "end_to_end_test $extra" "$python" "$test" -u "$http" --max-input-len 200 --dataset "$dataset" -c 4 $extra
done
exit "$failed"

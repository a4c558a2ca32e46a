#!/usr/bin/env bash
# Tensor parallelism on 2 GPUs (issue 5): GPT-2 1.3B (24 layers, d_model 2048, 16 heads, seq 1024,
# bf16, random tokens), micro-batch $MB (default 8), one GPU against tensor = 2 without sequence
# parallelism at each parallel.tensor_comm_chunks of $CHUNKS (default "1 2 4 8"), and with
# sequence parallelism; $WARMUP (3) untimed + $STEPS (8) timed steps, medians of rank 0's metrics.
#   bench/tensor_bench.sh [train_gpt binary, default build/train_gpt]
# Prints a markdown table: tokens/s, step ms, peak memory (rank 0), share of linear scaling.
# EXTRA_SETS: more key=value overrides for every run.
set -uo pipefail
bin=${1:-build/train_gpt}
out=${OUT:-$PWD/gpu-out}/tensor; mkdir -p "$out"
MB=${MB:-8}; WARMUP=${WARMUP:-3}; STEPS=${STEPS:-8}; TIMEOUT=${TIMEOUT:-200}; CHUNKS=${CHUNKS:-"1 2 4 8"}
source "$(dirname "$0")/layout_runs.sh"
gpt_toml bench/tensor_bench.sh 24 2048 16 "$MB" $((WARMUP + STEPS)) > "$out/base.toml"

names=(one)
run one 1
for c in $CHUNKS; do
  run "t2_c$c" 2 parallel.tensor=2 "parallel.tensor_comm_chunks=$c"
  names+=("t2_c$c")
done
run t2_sp 2 parallel.tensor=2 parallel.sequence_parallel=true
names+=(t2_sp)
summary "$WARMUP" "${names[@]}"

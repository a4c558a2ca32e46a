#!/usr/bin/env bash
# Data parallelism on 2 GPUs (issue 4): GPT-2 350M (24 layers, d_model 1024, 16 heads, seq 1024,
# bf16, random tokens), micro-batch $MB (default 16) per GPU, one GPU against data = 2 (ZeRO stage
# 0) with the default gradient reduction and with each variant that bears on its overlap: bf16 on
# the wire, smaller (100 MiB) buckets, NCCL held to fewer thread blocks (NCCL_MAX_CTAS: fewer SMs
# taken from the backward's GEMMs; it matters only where the sums take NCCL, i.e. with
# parallel.peer_all_reduce = false in EXTRA_SETS or without peer access), no overlap (the
# reduction's full cost), and ZeRO stage 1.
# $WARMUP (5) untimed + $STEPS (15) timed steps, medians of rank 0's metrics.
#   bench/data_bench.sh [train_gpt binary, default build/train_gpt]
# Prints a markdown table: tokens/s, step ms, peak memory (rank 0), share of linear scaling.
# EXTRA_SETS: more key=value overrides for every run; CTAS: the NCCL_MAX_CTAS values (default "4 8 16").
set -uo pipefail
bin=${1:-build/train_gpt}
out=${OUT:-$PWD/gpu-out}/data; mkdir -p "$out"
MB=${MB:-16}; WARMUP=${WARMUP:-5}; STEPS=${STEPS:-15}; TIMEOUT=${TIMEOUT:-200}; CTAS=${CTAS:-"4 8 16"}
source "$(dirname "$0")/layout_runs.sh"
gpt_toml bench/data_bench.sh 24 1024 16 "$MB" $((WARMUP + STEPS)) > "$out/base.toml"

names=(one d2 d2_bf16 d2_bucket100 d2_no_overlap d2_zero1)
run one 1
run d2 2
run d2_bf16 2 zero.reduce_dtype=bf16
run d2_bucket100 2 zero.bucket_mb=100
run d2_no_overlap 2 zero.overlap=false
run d2_zero1 2 zero.stage=1
for c in $CTAS; do
  RUN_ENV="NCCL_MAX_CTAS=$c" run "d2_ctas$c" 2
  names+=("d2_ctas$c")
done
summary "$WARMUP" "${names[@]}"

#!/usr/bin/env bash
# Session call 3 (2×H200): tensor = 2 at GPT-2 1.3B, the row-parallel weight gradients run beside the
# next column-parallel all-reduce (default) against before (TRELLIS_NO_DEFER=1, a temporary switch),
# with the peer all-reduce three times each and with NCCL once each; micro-batch 16 twice; one traced
# step at micro-batch 8.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call3 24 2048 16 8 11 > "$out/base.toml"
  REPEAT=2 run one 1
  REPEAT=3 run t2 2 parallel.tensor=2
  RUN_ENV="TRELLIS_NO_DEFER=1" REPEAT=3 run t2_nodefer 2 parallel.tensor=2
  run t2_nccl 2 parallel.tensor=2 parallel.peer_all_reduce=false
  RUN_ENV="TRELLIS_NO_DEFER=1" run t2_nccl_nodefer 2 parallel.tensor=2 parallel.peer_all_reduce=false
  run t2_trace 2 parallel.tensor=2 log.trace_step=8 log.trace_file=$out/t2.json
  summary 3 one t2 t2_nodefer t2_nccl t2_nccl_nodefer t2_trace
  python3 bench/trace_summary.py "$out/t2.rank0.json" 2>&1 | head -3
)
echo "=== tensor = 2, 1.3B micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor16; mkdir -p "$out"; TIMEOUT=120
  source bench/layout_runs.sh
  gpt_toml call3 24 2048 16 16 11 > "$out/base.toml"
  run one 1
  REPEAT=2 run t2 2 parallel.tensor=2
  summary 3 one t2
)
tar czf "$out/logs.tgz" -C "$out" tensor tensor16 && rm -rf "$out/tensor" "$out/tensor16"
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 4 (2×H200): the peer all-reduce's add kernel with its grid capped (TRELLIS_PEER_ADD_BLOCKS,
# a temporary switch; 0 = one thread per vector, 2048 blocks for an 8 MiB f32 chunk), so that fewer of
# its blocks queue between the backward GEMMs' waves. Data = 2 at GPT-2 350M micro-batch 16 and tensor = 2
# at GPT-2 1.3B micro-batch 8, twice each; a traced data = 2 step against a traced one-GPU step.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call4 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  REPEAT=2 run d2 2
  RUN_ENV="TRELLIS_PEER_ADD_BLOCKS=132" REPEAT=2 run d2_132 2
  RUN_ENV="TRELLIS_PEER_ADD_BLOCKS=32" REPEAT=2 run d2_32 2
  run one_trace 1 log.trace_step=10 log.trace_file=$out/one.json
  run d2_trace 2 log.trace_step=10 log.trace_file=$out/d2.json
  summary 5 one d2 d2_132 d2_32 one_trace d2_trace
  python3 bench/trace_summary.py "$out/d2.rank0.json" --base "$out/one.rank0.json" --top 30 2>&1 | head -45
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call4 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  REPEAT=2 run t2 2 parallel.tensor=2
  RUN_ENV="TRELLIS_PEER_ADD_BLOCKS=132" REPEAT=2 run t2_132 2 parallel.tensor=2
  summary 3 one t2 t2_132
)
tar czf "$out/logs.tgz" -C "$out" data tensor && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

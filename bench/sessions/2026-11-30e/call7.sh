#!/usr/bin/env bash
# Session call 7 (2×H200): data = 2 at 350M micro-batch 16 with the ready waits flushing remote writes
# (as in call 6) against not (TRELLIS_PEER_NO_FLUSH=1, a session-only switch), and one GPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call7 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  run d2 2
  RUN_ENV="TRELLIS_PEER_NO_FLUSH=1" run d2_noflush 2
  run d2_b 2
  RUN_ENV="TRELLIS_PEER_NO_FLUSH=1" run d2_noflush_b 2
  summary 5 one d2 d2_noflush d2_b d2_noflush_b
  grep -h "peer all-reduce:" "$out/d2.log" "$out/d2_noflush.log"
)
echo "=== done $(date +%T)"

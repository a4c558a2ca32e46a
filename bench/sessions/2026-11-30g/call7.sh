#!/usr/bin/env bash
# Session call 7 (1×H200): call 6's probe found cuBLASLt candidates up to 20% faster than the
# heuristic's first pick for 1.3B's backward shapes. Does TRELLIS_MATMUL_TUNE=1 (every candidate timed
# once per plan, on the real operands) shorten the GPT-2 1.3B micro-batch 16 step? Default, tuned
# (with each plan's timings logged), default again.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
(
  bin=build/train_gpt; out=$out/tune; mkdir -p "$out"; TIMEOUT=80
  source bench/layout_runs.sh
  gpt_toml call7 24 2048 16 16 12 > "$out/base.toml"
  run one 1
  RUN_ENV="TRELLIS_MATMUL_TUNE=1 TRELLIS_MATMUL_LOG=1" run tuned 1
  run one_after 1
  summary 4 one tuned one_after
  grep -h "tuned:" "$out/tuned.log" | sed -E 's/.*plan #([0-9]+): (M=[0-9]+ N=[0-9]+ K=[0-9]+).*trans_a=([01]) trans_b=([01]).*gelu=([a-z]+).*algo ([0-9]+) of ([0-9]+).*tuned: ([^)]*\)).*/#\1 \2 ta=\3 tb=\4 gelu=\5 algo \6 of \7, \8/' | head -30
)
tar czf "$out/logs.tgz" -C "$out" tune && rm -rf "$out/tune"
echo "=== done $(date +%T)"

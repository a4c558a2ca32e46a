#!/usr/bin/env bash
# Session call 5 (2×H200): ZeRO stage 0's gradient all-reduces at two ranks as a reduce-scatter and a
# direct gather into the peer's gradient buffer (half the adds; GradientSync shares the buffer), against
# the whole-tensor peer all-reduce (TRELLIS_WHOLE_ALL_REDUCE=1, a switch for this comparison only).
# Checks: comm_test at 2 ranks (all-reduce in a shared target bitwise against NCCL), deterministic
# data = 2 split and whole (same losses expected: the same sums). Speed: GPT-2 350M micro-batch 16.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 200 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerCollectives.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ|not rank|no peer" "$out/comm_test.log" | head -20
echo "=== deterministic data = 2 $(date +%T)"
(
  bin=build/train_gpt; out=$out/det; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call5 6 1024 16 8 12 "deterministic = true" > "$out/base.toml"
  run d2 2
  RUN_ENV="TRELLIS_WHOLE_ALL_REDUCE=1" run d2_whole 2
  run d2_z1 2 zero.stage=1
  losses d2 d2_whole d2_z1
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call5 24 1024 16 16 25 > "$out/base.toml"
  run one 1
  REPEAT=3 run d2 2
  RUN_ENV="TRELLIS_WHOLE_ALL_REDUCE=1" REPEAT=3 run d2_whole 2
  REPEAT=2 run d2_z1 2 zero.stage=1
  run one_after 1
  summary 5 one d2 d2_whole d2_z1 one_after
)
tar czf "$out/logs.tgz" -C "$out" det data comm_test.log && rm -rf "$out/det" "$out/data"
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 6 (2×H200): after the review mends (a second region of one peer allocation reuses the
# mapping; an odd count in a shared target): comm_test at 2 ranks, and data = 2 at stages 0 and 1 once
# each against one GPU (GPT-2 350M micro-batch 16).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 200 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerCollectives.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ|not rank|no peer" "$out/comm_test.log" | head -20
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call6 24 1024 16 16 20 > "$out/base.toml"
  run one 1
  run d2 2
  run d2_z1 2 zero.stage=1
  summary 5 one d2 d2_z1
)
tar czf "$out/logs.tgz" -C "$out" data comm_test.log && rm -rf "$out/data"
echo "=== done $(date +%T)"

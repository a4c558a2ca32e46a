#!/usr/bin/env bash
# Session call 7 (1×H200): the cross entropy's review mends (padding written as exact zeros whatever
# dloss, no rescale while a thread's max stays) and its new parity cases; the 1.3B profile's cross
# entropy against call 4's 0.98 ms.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ|CrossEntropy" "$out/parity.log" | head -20
source bench/gpt_toml.sh
gpt_toml call7 24 2048 16 16 8 > "$out/prof.toml"
timeout 90 build/train_gpt "$out/prof.toml" --set log.profile_ops=true > "$out/prof.log" 2>&1 || echo "prof FAILED"
sed -n '/per-op device time/,$p' "$out/prof.log" | grep -E "cross_entropy|^total"
grep -E "step +8/" "$out/prof.log"
echo "=== done $(date +%T)"

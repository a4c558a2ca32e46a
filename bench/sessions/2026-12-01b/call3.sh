#!/usr/bin/env bash
# Session call 3 (1×H200): after the watchdog and the review's mends (copies to host memory and GPU
# waits guarded, dump with f32 gradients): the CUDA op parity tests, the PyTorch check and
# gpu_e2e; then bench_gpt 1.3B against PyTorch again (two more rounds) for issue 8's record.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -3
echo "=== gpu_e2e $(date +%T)"
(cd build && timeout 240 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -20
echo "=== bench $(date +%T)"
timeout 260 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b --micro-batch 16 \
  --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1; echo "exit $?"
grep -hE "^\| [0-9]|rror" "$out/bench_1.3b.md"
tar czf /tmp/call3.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call3.tgz "$out/"
echo "=== done $(date +%T)"

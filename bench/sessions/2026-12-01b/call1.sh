#!/usr/bin/env bash
# Session call 1 (1×H200): 16-bit gradients (train.grad_dtype = auto) on the GPU. The CUDA op parity
# tests (GradientsIn16Bit among them) and the PyTorch check; gpu_e2e; the 1.3B per-op profile with
# 16-bit gradients; bench_gpt 1.3B against PyTorch (two rounds) with them, and Trellis with
# train.grad_dtype = f32 right after (the A/B on the same GPU in the same call).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
source bench/gpt_toml.sh
build_trellis
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -3
echo "=== gpu_e2e $(date +%T)"
(cd build && timeout 240 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -20
gpt_toml call1 24 2048 16 16 12 > "$out/m1.3b.toml"
echo "=== profile $(date +%T)"
timeout 90 build/train_gpt "$out/m1.3b.toml" --set log.profile_ops=true > "$out/prof.log" 2>&1 || echo "prof FAILED"
grep -E "memory per rank" "$out/prof.log"
sed -n '/per-op device time/,$p' "$out/prof.log" | head -40
echo "=== bench $(date +%T)"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b --micro-batch 16"
timeout 260 $B --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1; echo "exit $?"
timeout 60 $B --skip-torch --trellis-set train.grad_dtype=f32 --out "$out/bench_1.3b_f32.md" > "$out/bench_1.3b_f32.log" 2>&1
echo "exit $?"
grep -hE "^\| [0-9]|rror" "$out/bench_1.3b.md" "$out/bench_1.3b_f32.md"
tar czf /tmp/call1.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call1.tgz "$out/"
echo "=== done $(date +%T)"

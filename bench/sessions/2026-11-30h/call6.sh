#!/usr/bin/env bash
# Session call 6 (1×H200): why is fp16 4.5-4.9% slower than bf16 at GPT-2 124M (call 5) where it is
# ~3% at 350M and 1.3B? Per-op profiles of both, and each fp16 matmul plan (TRELLIS_MATMUL_LOG=1).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
source bench/gpt_toml.sh
gpt_toml call6 12 768 12 32 10 > "$out/base.toml"
for p in bf16 fp16; do
  TRELLIS_MATMUL_LOG=1 timeout 90 build/train_gpt "$out/base.toml" --set train.precision=$p --set log.profile_ops=true \
    > "$out/$p.log" 2>&1 || echo "$p FAILED"
  echo "--- $p"
  sed -n '/per-op device time/,$p' "$out/$p.log" | head -32
  grep -c "SEPARATE-KERNEL" "$out/$p.log"
  grep "SEPARATE-KERNEL" "$out/$p.log" | head -5 | cut -c1-200
done
echo "=== done $(date +%T)"

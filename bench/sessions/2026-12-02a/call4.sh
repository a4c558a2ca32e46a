#!/usr/bin/env bash
# Session call 4 (1×H200): gpu_e2e after the layer-norm change; then the head in one row chunk of
# 16384 instead of two of 8192 (a copy of the tree with kHeadChunkRows changed): per-op profiles of
# GPT-2 1.3B (micro-batch 16) and 124M (micro-batch 32), as built and with the larger chunk.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
source bench/gpt_toml.sh
build_targets train_gpt
echo "=== chunk tree $(date +%T)"
rm -rf /tmp/big && mkdir /tmp/big && tar cf - --exclude=./build . | tar xf - -C /tmp/big
sed -i 's|^constexpr int64_t kHeadChunkRows = 8192;|constexpr int64_t kHeadChunkRows = 16384;|' /tmp/big/models/gpt.cpp
grep -c "kHeadChunkRows = 16384" /tmp/big/models/gpt.cpp
(cd /tmp/big && cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_big.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build_big.log" 2>&1) || { tail -5 "$out/build_big.log"; exit 1; } &
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP" "$out/gpu_e2e.log" | head -30
wait
gpt_toml call4 24 2048 16 16 12 > "$out/m1.3b.toml"
gpt_toml call4 12 768 12 32 12 > "$out/m124m.toml"
for m in 1.3b 124m; do
  for who in built big; do
    bin=build/train_gpt; [[ $who == big ]] && bin=/tmp/big/build/train_gpt
    echo "=== profile $m $who $(date +%T)"
    timeout 90 $bin "$out/m$m.toml" --set log.profile_ops=true > "$out/prof_${m}_$who.log" 2>&1 || echo "prof FAILED"
    grep -E "memory per rank|peak" "$out/prof_${m}_$who.log" | head -3
    sed -n '/per-op device time/,$p' "$out/prof_${m}_$who.log" | grep -E "50304|cross_entropy|total"
  done
done
echo "=== done $(date +%T)"

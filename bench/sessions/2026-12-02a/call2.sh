#!/usr/bin/env bash
# Session call 2 (1×H200): the layer-norm backward in 32-row chunks at every width. CUDA parity and
# the PyTorch check; ln_cap_probe.cu with the other norm ops at the cap; the 1.3B per-op profile;
# then 1.3B Trellis alone, before (64-row chunks at two vectors a thread: a copy of the tree with the
# old line put back) and after, alternating, on the same GPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
source bench/gpt_toml.sh
build_targets train_gpt ops_parity_test
echo "=== old tree $(date +%T)"
rm -rf /tmp/old && mkdir /tmp/old && tar cf - --exclude=./build . | tar xf - -C /tmp/old
sed -i 's|    const int64_t chunks = layernorm_chunks(rows);|    const int64_t chunks = iters == 2 ? (layernorm_chunks(rows) + 1) / 2 : layernorm_chunks(rows);|' /tmp/old/core/cuda/norm.cu
grep -c "(layernorm_chunks(rows) + 1) / 2" /tmp/old/core/cuda/norm.cu
(cd /tmp/old && cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_old.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build_old.log" 2>&1) || { tail -5 "$out/build_old.log"; exit 1; }
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
echo "=== probe $(date +%T)"
nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/sessions/2026-12-02a/ln_cap_probe.cu core/dtype.cpp -lcublas \
  -o /tmp/ln_cap_probe > "$out/probe_build.log" 2>&1 || tail -5 "$out/probe_build.log"
timeout 120 /tmp/ln_cap_probe > "$out/probe.log" 2>&1; echo "probe exit $?"
grep -E "op as built|bias grad|forward op|squares" "$out/probe.log"
gpt_toml call2 24 2048 16 16 12 > "$out/m1.3b.toml"
echo "=== profile $(date +%T)"
timeout 90 build/train_gpt "$out/m1.3b.toml" --set log.profile_ops=true > "$out/prof.log" 2>&1 || echo "prof FAILED"
sed -n '/per-op device time/,$p' "$out/prof.log" | head -45
echo "=== A/B $(date +%T)"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --models 1.3b --micro-batch 16 --skip-torch"
for who in old new old new; do
  bin=build/train_gpt; [[ $who == old ]] && bin=/tmp/old/build/train_gpt
  timeout 80 $B --trellis $bin --out "$out/ab_$who.md" > "$out/ab_$who.log" 2>&1; echo "$who exit $?"
  grep -hE "^\| [0-9]|rror" "$out/ab_$who.md" | head -2
done
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 1 (1×H200): the experts' GEMMs as strided batches (one cuBLASLt call per GEMM and
# source rank instead of one per expert). CUDA parity (the batched GEMM against the CPU's one problem
# at a time; every other op, the dense GEMMs' plans being keyed anew), the PyTorch check with
# experts on the GPU, the per-op profile of 124M with 8 experts in every other block before (the
# previous commit, checked out in ../.snap-old) and after, and bench_gpt --moe 8,2,2 at 124M: PyTorch,
# Trellis after, Trellis before.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
old=../.snap-old
[[ -e $old/third_party ]] || ln -sfn "$PWD/third_party" "$old/third_party"
(cd $old && cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_old.log" 2>&1 &&
  cmake --build build -j12 --target train_gpt >> "$out/build_old.log" 2>&1; echo "old build exit $?" >> "$out/build_old.log") &
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 240 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
grep -E "MatmulBatched|MoERouting" "$out/parity.log" | grep -E "OK|FAILED" | head -8
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda --set moe.experts=4 \
  --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 2>&1 | tail -2
wait; tail -2 "$out/build_old.log"
MOE="--set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2"
for who in new old; do
  echo "=== profile $who $(date +%T)"
  bin=build/train_gpt; [[ $who == old ]] && bin=$old/build/train_gpt
  timeout 120 $bin bench/profile_124m.toml $MOE --set log.profile_ops=true > "$out/profile_$who.log" 2>&1
  echo "profile exit $?"; grep -E "step +6/6" "$out/profile_$who.log"
  sed -n '/per-op device time/,$p' "$out/profile_$who.log" | grep -E "per-op|matmul|bias_backward" | head -24
done
echo "=== bench $(date +%T)"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis-libs torch --models 124m --micro-batch 16 --moe 8,2,2"
timeout 200 $B --trellis build/train_gpt 2>&1 | tail -3
timeout 100 $B --trellis $old/build/train_gpt --skip-torch 2>&1 | tail -2
echo "=== done $(date +%T)"

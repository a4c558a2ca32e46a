#!/usr/bin/env bash
# Session call 2 (1×H200): call 1 measured the batched DGELU GEMM at half the speed of one call per
# expert and every other batched form faster, so the DGELU GEMM now runs one expert at a time. The
# batched-GEMM parity again, the 124M-with-8-experts profile after and before (../.snap-old), and
# bench_gpt with experts: --moe 8,2,2 at 124M (PyTorch, after, before) and 350M (PyTorch, after), and
# --moe 32,2,2 at 124M (PyTorch, after, before).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
old=../.snap-old
[[ -e $old/third_party ]] || ln -sfn "$PWD/third_party" "$old/third_party"
(cd $old && cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_old.log" 2>&1 &&
  cmake --build build -j12 --target train_gpt >> "$out/build_old.log" 2>&1; echo "old build exit $?" >> "$out/build_old.log") &
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 100 build/tests/ops_parity_test --gtest_filter='*Matmul*:*MoE*' 2>&1 | grep -E "^\[  (PASSED|FAILED) |Failure" -A2 | head -10
wait; tail -1 "$out/build_old.log"
MOE="--set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2"
for who in new old; do
  echo "=== profile $who $(date +%T)"
  bin=build/train_gpt; [[ $who == old ]] && bin=$old/build/train_gpt
  timeout 120 $bin bench/profile_124m.toml $MOE --set log.profile_ops=true > "$out/profile_$who.log" 2>&1
  echo "profile exit $?"; grep -E "step +6/6" "$out/profile_$who.log"
  sed -n '/per-op device time/,$p' "$out/profile_$who.log" | grep -E "per-op| 8 x |5120x|bias_backward" | head -12
done
bench() {  # model micro-batch moe [old]
  echo "=== bench $* $(date +%T)"
  local B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis-libs torch --models $1 --micro-batch $2 --moe $3"
  timeout 200 $B --trellis build/train_gpt 2>&1 | grep -E "^\| $1"
  [[ ${4:-} == old ]] && timeout 100 $B --trellis $old/build/train_gpt --skip-torch 2>&1 | grep -E "^\| $1"
}
bench 124m 16 8,2,2 old
bench 124m 16 32,2,2 old
bench 350m 8 8,2,2
echo "=== done $(date +%T)"

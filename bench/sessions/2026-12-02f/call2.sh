#!/usr/bin/env bash
# Session call 2 (1×H200): the merged MoE row kernels with the gate as a template parameter (call 1's
# profile had the combine and the dispatch's backward ~0.02 ms a step slower than the separate
# kernels of ../.snap-old, commit 34fd6ac). MoE parity, the PyTorch MoE check, then the 124M-with-8-
# experts profile new / old / new / old.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
old=../.snap-old
[[ -e $old/third_party ]] || ln -sfn "$PWD/third_party" "$old/third_party"
(cd $old && cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_old.log" 2>&1 &&
  cmake --build build -j12 --target train_gpt >> "$out/build_old.log" 2>&1; echo "old build exit $?" >> "$out/build_old.log") &
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 120 build/tests/ops_parity_test --gtest_filter='*MoE*' > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure" "$out/parity.log" | head -12
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda --set moe.experts=4 \
  --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 2>&1 | tail -2
wait; tail -1 "$out/build_old.log"
MOE="--set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2"
for who in new old new old; do
  echo "=== profile $who $(date +%T)"
  bin=build/train_gpt; [[ $who == old ]] && bin=$old/build/train_gpt
  timeout 60 $bin bench/profile_124m.toml $MOE --set log.profile_ops=true > "$out/profile.log" 2>&1
  echo "profile exit $?"; grep -E "step +6/6" "$out/profile.log" | grep -oE "[0-9.]+ ms"
  sed -n '/per-op device time/,$p' "$out/profile.log" | grep -E "moe_(dispatch|combine)" | head -4
done
echo "=== done $(date +%T)"

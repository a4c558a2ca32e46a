#!/usr/bin/env bash
# Session call 1 (1×H200): after the MoE row kernels were merged (dispatch and the combine's backward
# slot rows: slots_from_tokens; the combine and the dispatch's backward: tokens_from_slots). The MoE
# parity (dispatch bitwise, the rest close, f32/bf16/f16), the PyTorch MoE check and gpu_e2e (experts:
# GPU against CPU, graphs, resume); the 124M-with-8-experts profile after and before (the previous
# commit in ../.snap-old); GPT-2 1.3B against PyTorch, two rounds (issue 8, no change to the dense step).
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
echo "=== torch parity with experts $(date +%T)"
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda --set moe.experts=4 \
  --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 > "$out/torch_parity.log" 2>&1
echo "torch parity exit $?"; tail -3 "$out/torch_parity.log"
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|experts" "$out/gpu_e2e.log" | head -8
wait; tail -1 "$out/build_old.log"
MOE="--set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2"
for who in new old; do
  echo "=== profile $who $(date +%T)"
  bin=build/train_gpt; [[ $who == old ]] && bin=$old/build/train_gpt
  timeout 60 $bin bench/profile_124m.toml $MOE --set log.profile_ops=true > "$out/profile_$who.log" 2>&1
  echo "profile exit $?"; grep -E "step +6/6" "$out/profile_$who.log"
  sed -n '/per-op device time/,$p' "$out/profile_$who.log" | grep -E "per-op|moe_" | head -8
done
echo "=== 1.3B against PyTorch $(date +%T)"
timeout 300 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 2 2>&1 | grep -E "^\||loaded"
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 3 (1×H200): the final code, with the experts' bias gradients as one batched
# bias_backward per source rank (column partials in chunks that never span two experts, one strided
# finalize) instead of one call an expert. CUDA parity (every op: BiasBackwardBatched and MatmulBatched
# among them), gpu_e2e (GPU against CPU, CUDA graphs, resume, the cases with experts), the 124M-with-8-
# experts profile after and before (the previous commit, in ../.snap-old), bench_gpt --moe 32,2,2 at
# 124M after and before (Trellis alone), and GPT-2 1.3B Trellis alone (dense: as before, ~228-234 ms).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
old=../.snap-old
[[ -e $old/third_party ]] || ln -sfn "$PWD/third_party" "$old/third_party"
(cd $old && cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_old.log" 2>&1 &&
  cmake --build build -j12 --target train_gpt >> "$out/build_old.log" 2>&1; echo "old build exit $?" >> "$out/build_old.log") &
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure" "$out/parity.log" | head -10
grep -E "BiasBackwardBatched|MatmulBatched" "$out/parity.log" | grep -E "OK|FAILED" | head -6
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
  sed -n '/per-op device time/,$p' "$out/profile_$who.log" | grep -E "per-op|bias_backward" | head -3
done
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis-libs torch --skip-torch"
echo "=== 32 experts $(date +%T)"
timeout 60 $B --models 124m --micro-batch 16 --moe 32,2,2 --trellis build/train_gpt 2>&1 | grep -E "^\| 124m"
timeout 60 $B --models 124m --micro-batch 16 --moe 32,2,2 --trellis $old/build/train_gpt 2>&1 | grep -E "^\| 124m"
echo "=== 1.3B $(date +%T)"
timeout 60 $B --models 1.3b --micro-batch 16 --trellis build/train_gpt 2>&1 | grep -E "^\| 1.3b"
echo "=== done $(date +%T)"

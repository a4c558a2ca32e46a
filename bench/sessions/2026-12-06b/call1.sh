#!/usr/bin/env bash
# Session call 1 (one GPU): rotary positions (model.position_embedding = rope) on a GPU: the whole
# build, every CUDA test (RotaryEmbedding parity among them), the PyTorch reference's rotation
# against transformers' Llama one, the PyTorch parity tests (torch_parity_rope new), gpu_e2e (its
# rope cases new); GPT-2 1.3B Trellis alone with learned and with rotary positions (the rotation's
# cost), then one bench_gpt round at 1.3B against PyTorch (issue 8's tally).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== ctest -L cuda $(date +%T)"
(cd build && timeout 300 ctest -L cuda -j4 > "$out/ctest_cuda.log" 2>&1); echo "ctest exit $?"
grep -E "tests passed|tests failed|Failed|\*\*\*Failed|Total Test" "$out/ctest_cuda.log" | head -12
echo "=== torch_gpt selftest $(date +%T)"
timeout 120 python3 bench/torch_gpt.py --selftest 2>&1 | tail -8
echo "=== torch parity $(date +%T)"
(cd build && timeout 240 ctest -R torch_parity --output-on-failure > "$out/torch_parity.log" 2>&1); echo "torch parity exit $?"
grep -E "worst|loss:|Passed|Failed|tests passed" "$out/torch_parity.log" | head -12
echo "=== gpu_e2e $(date +%T)"
timeout 300 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|rotary" "$out/gpu_e2e.log" | head -8
echo "=== 1.3B learned / rope / learned / rope $(date +%T)"
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
for pos in learned rope learned rope; do
  timeout 100 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=15 --set log.every=1 \
    --set model.position_embedding=$pos > "$out/13b_$pos.log" 2>&1
  echo "$pos: $(grep '^step' "$out/13b_$pos.log" | tail -10 | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' | sort -n | awk '{a[NR]=$1} END{print "median of last 10 steps", a[int((NR+1)/2)], "ms"}') $(grep -o 'peak [0-9.]* GiB' "$out/13b_$pos.log" | tail -1)"
done
echo "=== bench_gpt 1.3B $(date +%T)"
timeout 200 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 2>&1 | tail -8
echo "=== done $(date +%T)"

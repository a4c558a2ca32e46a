#!/usr/bin/env bash
# Session call 2 (2×H200), issue 9 item 2: a ~7B GPT (32 layers, d_model 4096, 32 heads) on two
# GPUs, micro-batch 4 per GPU, global batch 8 x 1024 tokens: PyTorch FSDP2 against Trellis at
# tensor = 2 (ZeRO stage 1, two micro-batches accumulated), then Trellis at data = 2 with ZeRO stage 3.
# One GPU holds neither framework's 7B model states (~121 GB for Trellis), so there are no 1-GPU rows.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
B="python3 bench/bench_gpt.py --models 7b --micro-batch 4 --steps 10 --warmup 3 --trellis build/train_gpt --data-parallel 2 --skip-single"
echo "=== FSDP2 and tensor = 2 $(date +%T)"
timeout 400 $B --torch-parallel fsdp --trellis-layout 2,1 --out "$out/bench_7b_tp2.md" > "$out/bench_7b_tp2.log" 2>&1
echo "exit $?"; grep -E "^\| |rror|scaling|x2:" "$out/bench_7b_tp2.log" | tail -8
echo "=== ZeRO stage 3 at data = 2 $(date +%T)"
timeout 150 $B --skip-torch --trellis-set zero.stage=3 --out "$out/bench_7b_z3.md" > "$out/bench_7b_z3.log" 2>&1
echo "exit $?"; grep -E "^\| |rror|x2:" "$out/bench_7b_z3.log" | tail -4
echo "=== done $(date +%T)"

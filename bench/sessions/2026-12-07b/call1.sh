#!/usr/bin/env bash
# Session call 1 (one GPU): Llama's whole architecture with Llama 3's rope scaling
# (model.rope_scaling = llama3, original positions 64, so the tiny model's frequencies fall in all
# three bands) trained 8 deterministic steps on the CPU and the GPU in fp32, and in bf16 with and
# without CUDA graphs; the matmul and rotary parity tests; then issue 8's GPT-2 1.3B against the
# PyTorch reference, two rounds (bench_gpt alternates which runs first).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt ops_parity_test
timeout 60 build/tests/ops_parity_test --gtest_filter='*Matmul*:*Rotary*' 2>&1 | grep -E "PASSED|FAILED|Failure" | head -8
LLAMA="--set model.norm=rmsnorm --set model.norm_eps=1e-6 --set model.position_embedding=rope --set model.rope_theta=500
  --set model.rope_scaling=llama3 --set model.rope_original_positions=64
  --set model.mlp=swiglu --set model.ffn_hidden_size=90 --set model.tie_embeddings=false --set model.n_kv_heads=2
  --set model.bias=false --set train.steps=8 --set log.every=1 --set train.deterministic=true"
losses() { grep -E '^step' "$1" | grep -v val | awk '{print $5}' | tr '\n' ' '; }
for v in "cpu fp32" "cuda fp32" "cuda bf16" "cuda bf16 nographs"; do
  read -r dev prec graphs <<< "$v"
  extra=""; [[ "$graphs" == nographs ]] && extra="--set train.cuda_graphs=false"
  log="$out/llama_scaled_${dev}_${prec}${graphs:+_$graphs}.log"
  timeout 60 build/train_gpt examples/configs/tiny.toml $LLAMA --set train.device=$dev --set train.precision=$prec $extra > "$log" 2>&1
  echo "$v: exit $? losses $(losses "$log") val $(grep -o 'val loss [0-9.]*' "$log" | tail -1)"
done
grep -m1 "^model:" "$out/llama_scaled_cpu_fp32.log"
echo "=== GPT-2 1.3B against PyTorch, 2 rounds $(date +%T) (${SECONDS}s)"
timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b_r2.md" > "$out/bench_1.3b_r2.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r2.md"
echo "=== done $(date +%T) (${SECONDS}s)"

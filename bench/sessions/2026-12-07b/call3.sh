#!/usr/bin/env bash
# Session call 3 (one GPU): Mixtral's architecture against the PyTorch reference's (bench/torch_gpt.py,
# its MoE a loop over the experts' SwiGLU MLPs under torch.compile) at examples/configs/mixtral_8x125m.toml's
# shape with GPT-2's vocabulary: 12 layers, d_model 768, 4 key-value heads of 12, rotary positions,
# RMSNorm, an untied head, no biases, 8 SwiGLU experts of width 2048 in every block, top 2; then
# GPT-2's 124M with 8 GELU experts in every other block (the MoE rows measured before), one round each.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt
echo "=== Mixtral 8 x 125M against PyTorch $(date +%T) (${SECONDS}s)"
timeout 280 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 124m --micro-batch 16 --rounds 1 --moe 8,2,1,2048 --swiglu --no-bias --rmsnorm --rope 10000 --kv-heads 4 \
  --untied --out "$out/bench_mixtral.md" > "$out/bench_mixtral.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9a-z]|^- |^Both" "$out/bench_mixtral.md"
echo "=== GPT-2 124M, 8 GELU experts every other block, against PyTorch $(date +%T) (${SECONDS}s)"
timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 124m --micro-batch 16 --rounds 1 --moe 8,2,2 --out "$out/bench_moe.md" > "$out/bench_moe.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9a-z]|^- " "$out/bench_moe.md"
echo "=== done $(date +%T) (${SECONDS}s)"

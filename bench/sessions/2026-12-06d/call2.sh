#!/usr/bin/env bash
# Session call 2 (one GPU): issue 8's rounds, GPT-2 1.3B against PyTorch (two rounds); what the MLP
# costs at the 1.3B shape (Trellis alone, median of the last 10 steps, alternating): GELU, SwiGLU at
# 4C, SwiGLU at 5504 (~8/3 C: about GELU's parameters); 350M with SwiGLU against PyTorch with SwiGLU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch"
echo "=== 1.3B $(date +%T)"
timeout 260 $B --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
median() {  # the median step ms of the last 10 steps of a train_gpt log
  grep '^step' "$1" | tail -10 | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' | sort -n |
    awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'
}
echo "=== 1.3B MLPs $(date +%T)"
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
for round in 1 2; do
  for mlp in gelu:0 swiglu:0 swiglu:5504; do
    timeout 100 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=15 --set log.every=1 \
      --set model.mlp=${mlp%:*} --set model.ffn_hidden_size=${mlp#*:} > "$out/13b_${mlp/:/_}_$round.log" 2>&1
    echo "$mlp: median of the last 10 steps $(median "$out/13b_${mlp/:/_}_$round.log") ms," \
      "$(grep -o 'peak [0-9.]* GiB' "$out/13b_${mlp/:/_}_$round.log" | tail -1), $(grep -o '^parameters: [0-9,]*' "$out/13b_${mlp/:/_}_$round.log")"
  done
done
echo "=== 350M, both with SwiGLU $(date +%T)"
timeout 130 $B --models 350m --micro-batch 16 --swiglu --out "$out/bench_350m_swiglu.md" > "$out/bench_350m_swiglu.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]" "$out/bench_350m_swiglu.md"
echo "=== done $(date +%T)"

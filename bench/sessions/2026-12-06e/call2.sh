#!/usr/bin/env bash
# Session call 2 (one GPU): issue 8's GPT-2 1.3B against the PyTorch reference, one round (train_gpt
# alone built), and Trellis alone at the 1.3B shape with grouped-query attention (8 of 16 key-value
# heads) and with an untied head (median of the last 10 of 15 steps).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt
echo "=== 1.3B against PyTorch $(date +%T) (${SECONDS}s)"
timeout 420 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
  --models 1.3b --micro-batch 16 --rounds 1 --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b.md"
median() {  # the median step ms of the last 10 steps of a train_gpt log
  grep '^step' "$1" | tail -10 | awk '{for(i=1;i<=NF;i++) if($i=="ms") print $(i-1)}' | sort -n |
    awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'
}
L13="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set train.micro_batch=16"
for v in n_kv_heads=8 tie_embeddings=false; do
  (( SECONDS > 540 )) && { echo "out of time"; break; }
  log="$out/13b_${v%%=*}.log"
  timeout 50 build/train_gpt bench/profile_124m.toml $L13 --set train.steps=15 --set log.every=1 --set model.$v > "$log" 2>&1
  echo "$v: median of the last 10 steps $(median "$log") ms, $(grep -o 'peak [0-9.]* GiB' "$log" | tail -1)"
done
echo "=== done $(date +%T) (${SECONDS}s)"

#!/usr/bin/env bash
# Session call 3 (one GPU, little device time left): Llama's whole architecture with Llama 3's rope
# scaling (model.rope_scaling = llama3, original positions 64, so the tiny model's frequencies fall in
# all three bands) trained 8 deterministic steps on the CPU and the GPU in fp32, and in bf16 with and
# without CUDA graphs. train_gpt built alone.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets train_gpt
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
echo "=== done $(date +%T) (${SECONDS}s)"

#!/usr/bin/env bash
# Session call 3 (one GPU, little device time left): the linear layers without biases (model.bias =
# false) on a GPU. train_gpt and ops_parity_test built alone; the matmul parity tests (a residual
# without a bias, new); Llama's whole architecture (RMSNorm eps 1e-6, rope, SwiGLU at width 90, an
# untied head, 2 of 4 key-value heads, no linear biases) trained 8 deterministic steps on the CPU and
# the GPU in fp32, and in bf16 with and without CUDA graphs.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets train_gpt ops_parity_test
echo "=== matmul parity $(date +%T) (${SECONDS}s)"
timeout 60 build/tests/ops_parity_test --gtest_filter='*Matmul*' 2>&1 | grep -E "PASSED|FAILED|Failure|residual" | head -20
LLAMA="--set model.norm=rmsnorm --set model.norm_eps=1e-6 --set model.position_embedding=rope --set model.rope_theta=500
  --set model.mlp=swiglu --set model.ffn_hidden_size=90 --set model.tie_embeddings=false --set model.n_kv_heads=2
  --set model.bias=false --set train.steps=8 --set log.every=1 --set train.deterministic=true"
losses() { grep -E '^step' "$1" | grep -v val | awk '{print $5}' | tr '\n' ' '; }
for v in "cpu fp32" "cuda fp32" "cuda bf16" "cuda bf16 nographs"; do
  read -r dev prec graphs <<< "$v"
  extra=""; [[ "$graphs" == nographs ]] && extra="--set train.cuda_graphs=false"
  log="$out/llama_${dev}_${prec}${graphs:+_$graphs}.log"
  timeout 60 build/train_gpt examples/configs/tiny.toml $LLAMA --set train.device=$dev --set train.precision=$prec $extra > "$log" 2>&1
  echo "$v: exit $? losses $(losses "$log") $(grep -o 'cuda graphs: .*' "$log")"
done
grep -m1 "^model:" "$out/llama_cpu_fp32.log"
echo "=== done $(date +%T) (${SECONDS}s)"

#!/usr/bin/env bash
# Session call 2 (one GPU, H100 or H200): QK-norm's kernels, Mixtral's experts and Qwen2-MoE's shared gate
# (sigmoid_gate_rows) on the GPU, most
# telling first (the device budget may cut it short). train_gpt, export_hf and ops_parity_test built
# alone; the QK-norm, SwiGLU (now also in place), MoE (gates renormalized and not), matmul and rotary
# parity tests (rotary with YaRN's); the PyTorch parity of Qwen3's attention (QK-norm, heads of 24 at
# d_model 64), of YaRN's rope scaling, of
# Mixtral's block and of the MoE (unrenormalized) on the GPU; Llama 3's rope scaling on the GPU against the CPU;
# gpu_e2e (its Mixtral cases new: width 90 against the CPU in fp32, bf16 graphs against launched).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets train_gpt export_hf ops_parity_test
timeout 120 build/tests/ops_parity_test --gtest_filter='*QkNorm*:*Swiglu*:*MoE*:*SigmoidGate*:*Matmul*:*Rotary*' > "$out/parity.log" 2>&1
echo "parity exit $?"; grep -E "PASSED|FAILED|Failure" "$out/parity.log" | head -12
echo "=== torch parity on the GPU $(date +%T) (${SECONDS}s)"
MOE="--set moe.experts=4 --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 --set moe.z_loss_coef=0.1 --set moe.shared_experts=1"
MIXTRAL="$MOE --set moe.ffn_hidden_size=40 --set moe.layer_freq=2 --set model.n_layers=3 --set model.mlp=swiglu
  --set model.ffn_hidden_size=88 --set model.bias=false --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500"
QWEN3="--set model.n_kv_heads=2 --set model.qk_norm=true --set model.head_dim=24 --set model.mlp=swiglu
  --set model.ffn_hidden_size=88 --set model.bias=false --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500"
YARN="--set model.position_embedding=rope --set model.rope_theta=500 --set model.rope_scaling=yarn
  --set model.rope_scaling_factor=4 --set model.rope_original_positions=16"
QWEN2MOE="--set moe.experts=8 --set moe.top_k=4 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1
  --set moe.shared_experts=2 --set moe.shared_gate=true --set moe.ffn_hidden_size=32 --set moe.renormalize=false
  --set model.mlp=swiglu --set model.bias=false --set model.qkv_bias=true --set model.norm=rmsnorm
  --set model.position_embedding=rope --set model.rope_theta=500"
DEEPSEEKMOE="--set moe.experts=8 --set moe.top_k=3 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 --set moe.shared_experts=2
  --set moe.ffn_hidden_size=32 --set moe.first_dense_layers=1 --set moe.renormalize=false --set model.n_layers=3 --set model.mlp=swiglu
  --set model.ffn_hidden_size=88 --set model.bias=false --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500"
for v in QWEN3 YARN QWEN2MOE MOE MIXTRAL DEEPSEEKMOE; do
  extra=""; [[ $v == MOE ]] && extra="--set moe.renormalize=false"
  timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda ${!v} $extra > "$out/parity_$v.log" 2>&1
  echo "$v: exit $? $(grep -E 'gradient tensors' "$out/parity_$v.log")"
done
echo "=== Llama 3 rope scaling, GPU against CPU $(date +%T) (${SECONDS}s)"
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
  echo "$v: exit $? losses $(losses "$log")"
done
echo "=== gpu_e2e $(date +%T) (${SECONDS}s)"
(cd tests/e2e && timeout 300 python3 gpu_e2e.py ../../build/train_gpt "$(command -v mpiexec)" ../../examples/configs/tiny.toml) \
  > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -E "^(ok|FAIL)|PASS|GPU" "$out/gpu_e2e.log" | grep -iE "FAIL|mixtral|experts|PASS|GPU\(s\)" | head -20
grep -c "^ok" "$out/gpu_e2e.log"
echo "=== done $(date +%T) (${SECONDS}s)"

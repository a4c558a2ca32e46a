#!/usr/bin/env bash
# Session call 2 (one GPU): document masking (data.document_mask) on the GPU. The attention kernels
# against the CPU (every attention case: the own flash kernels changed for it), the PyTorch reference
# on the GPU in fp32 with documents, then a Llama-shaped 124M at 4096 tokens, bf16, on Shakespeare's
# bytes: no mask (cuDNN; the own kernels under train.deterministic), and documents ending at ':' (~108
# bytes apart), '?' (~453) and 'X' (~9958: hardly any boundary, the masking's own cost).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets ops_parity_test train_gpt prepare_data
echo "=== kernel parity $(date +%T) (${SECONDS}s)"
timeout 200 build/tests/ops_parity_test --gtest_filter='*Attention*:*Embedding*:*MatmulRowsVary*:*MoERouting*' > "$out/parity.log" 2>&1
echo "ops_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|cuDNN takes" "$out/parity.log" | head -20
echo "=== PyTorch reference on the GPU, fp32 $(date +%T) (${SECONDS}s)"
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda \
  --set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu \
  --set model.bias=false --set model.n_kv_heads=2 --set data.document_mask=true --set data.eod_token=10 > "$out/torch_parity.log" 2>&1
echo "torch_parity exit $?"; grep -E "loss:|PASS|FAIL" "$out/torch_parity.log" | head -5
build/prepare_data --input "$_root/.data/tinyshakespeare.txt" --output /tmp/shk --tokenizer byte > "$out/prepare.log" 2>&1 || { tail -3 "$out/prepare.log"; exit 1; }
echo "=== Llama-shaped 124M, 4096 tokens, bf16, 20 steps $(date +%T) (${SECONDS}s)"
run() {  # tag, extra sets
  local tag=$1; shift
  timeout 100 build/train_gpt bench/profile_124m.toml --set model.position_embedding=rope --set model.norm=rmsnorm \
    --set model.mlp=swiglu --set model.bias=false --set model.seq_len=4096 --set train.micro_batch=8 \
    --set data.source=file --set data.path=/tmp/shk --set train.steps=20 --set log.every=10 "$@" > "$out/docs_$tag.log" 2>&1
  echo "$tag: exit $? | $(grep -E '^step +20/' "$out/docs_$tag.log" | cut -c1-200)"
}
run none
run none_own --set train.deterministic=true
run colon --set data.document_mask=true --set data.eod_token=58
run question --set data.document_mask=true --set data.eod_token=63
run X --set data.document_mask=true --set data.eod_token=88
echo "=== done $(date +%T) (${SECONDS}s)"

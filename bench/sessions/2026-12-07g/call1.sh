#!/usr/bin/env bash
# Session call 1 (one GPU): sessions 35-37's CUDA paths. Document masking (data.document_mask):
# every attention and embedding case against the CPU (the own flash kernels changed for it), the
# PyTorch reference on the GPU in fp32 with documents, with positions reset and with the loss mask
# (data.eod_mask_loss); then a Llama-shaped 124M at 4096 tokens, bf16, on Shakespeare's bytes: no
# mask (cuDNN; the own kernels under train.deterministic), documents ending at ':' (~108 bytes
# apart), '?' (~453) and 'X' (~9958: hardly any boundary, the masking's own cost), and '?' with the
# loss mask (its steps must still replay one CUDA graph: the count rides in the step scalars).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_targets ops_parity_test train_gpt prepare_data
echo "=== kernel parity $(date +%T) (${SECONDS}s)"
[[ -n ${SKIP_PARITY:-} ]] || timeout 200 build/tests/ops_parity_test --gtest_filter='*Attention*:*Embedding*:*MatmulRowsVary*:*MoERouting*' > "$out/parity.log" 2>&1
echo "ops_parity exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|cuDNN takes" "$out/parity.log" | head -20
echo "=== PyTorch reference on the GPU, fp32 $(date +%T) (${SECONDS}s)"
llama="--set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu --set model.bias=false --set model.n_kv_heads=2"
parity() {  # tag, sets
  local tag=$1; shift
  timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda "$@" > "$out/torch_parity_$tag.log" 2>&1
  echo "torch_parity $tag exit $? | $(grep -E "^loss:|^targets:|gradient tensors" "$out/torch_parity_$tag.log" | tr '\n' ' ' | cut -c1-300)"
}
parity documents $llama --set data.document_mask=true --set data.eod_token=10
parity reset_positions --set data.document_mask=true --set data.eod_token=10 --set data.reset_positions=true
parity eod_mask_loss --set data.document_mask=true --set data.eod_token=10 --set data.eod_mask_loss=true
build/prepare_data --input "$_root/.data/tinyshakespeare.txt" --output /tmp/shk --tokenizer byte --force > "$out/prepare.log" 2>&1 || { tail -3 "$out/prepare.log"; exit 1; }
echo "=== Llama-shaped 124M, 4096 tokens, bf16, 20 steps $(date +%T) (${SECONDS}s)"
run() {  # tag, extra sets
  local tag=$1; shift
  timeout 100 build/train_gpt bench/profile_124m.toml --set model.position_embedding=rope --set model.norm=rmsnorm \
    --set model.mlp=swiglu --set model.bias=false --set model.seq_len=4096 --set train.micro_batch=8 \
    --set data.source=file --set data.path=/tmp/shk --set train.steps=20 --set log.every=10 "$@" > "$out/docs_$tag.log" 2>&1
  echo "$tag: exit $? | $(grep -E '^step +20/' "$out/docs_$tag.log" | cut -c1-200) | $(grep -E '^cuda graphs|^error' "$out/docs_$tag.log" | cut -c1-120)"
}
run none
run none_own --set train.deterministic=true
run colon --set data.document_mask=true --set data.eod_token=58
run question --set data.document_mask=true --set data.eod_token=63
run X --set data.document_mask=true --set data.eod_token=88
run question_lossmask --set data.document_mask=true --set data.eod_token=63 --set data.eod_mask_loss=true
echo "=== done $(date +%T) (${SECONDS}s)"

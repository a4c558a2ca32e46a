#!/usr/bin/env bash
# Session call 2 (one GPU). On an H200: issue 8's GPT-2 1.3B against the PyTorch reference (two
# rounds). On any other card: this session's trainer changes on the GPU. torch_parity.py --device
# cuda, whose training-step check (the loop's logged loss and gradient norm against the reference)
# is new, on GPT-2, on Llama-shaped documents and on the loss mask; then a bf16 run of the tiny
# model with validation, whose last validation train_gpt --eval must repeat from its checkpoint.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm --format=csv,noheader
build_targets train_gpt
if [[ $gpu == *H200* ]]; then
  echo "=== GPT-2 1.3B against PyTorch, 2 rounds $(date +%T) (${SECONDS}s)"
  timeout $((590 - SECONDS)) python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --trellis-libs torch \
    --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_1.3b_r2.md" > "$out/bench_1.3b_r2.log" 2>&1
  echo "exit $?"; grep -E "^\| [0-9]|^- " "$out/bench_1.3b_r2.md"
  echo "=== done $(date +%T) (${SECONDS}s)"; exit 0
fi
cfg=examples/configs/tiny.toml
llama="--set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu
  --set model.bias=false --set model.n_kv_heads=2 --set data.document_mask=true --set data.eod_token=10"
for case in "gpt2|" "llama_documents|$llama" "eod_mask_loss|--set data.eod_token=10 --set data.eod_mask_loss=true --set data.document_mask=true"; do
  name=${case%%|*}; sets=${case#*|}
  echo "=== torch_parity --device cuda: $name $(date +%T) (${SECONDS}s)"
  python3 tests/e2e/torch_parity.py build/train_gpt $cfg --device cuda $sets > "$out/parity_$name.log" 2>&1
  echo "exit $?"; grep -E "^loss:|^training step|worst rel err|^PASS|^FAIL" "$out/parity_$name.log"
done
echo "=== bf16 run with validation, then --eval $(date +%T) (${SECONDS}s)"
sets="--set train.device=cuda --set train.precision=bf16 --set train.steps=40 --set log.val_every=20 --set log.val_batches=4
  --set train.global_batch=16 --set checkpoint.dir=/tmp/evalck --set log.metrics_file=/tmp/evalck.jsonl"
build/train_gpt $cfg $sets > "$out/eval_train.log" 2>&1; echo "train exit $?"
grep -E "val loss|cuda graphs" "$out/eval_train.log"
build/train_gpt $cfg $sets --eval > "$out/eval.log" 2>&1; echo "eval exit $?"
grep -E "^eval:" "$out/eval.log"
echo "=== done $(date +%T) (${SECONDS}s)"

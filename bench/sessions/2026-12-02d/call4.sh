#!/usr/bin/env bash
# Session call 4 (1×H200): quality with experts, and generation with experts on the GPU.
# examples/configs/shakespeare_char.toml for 2000 steps, dense against 8 experts (top 2) in every
# other block (the same active parameters per token: one MLP's worth in each block, two in a block
# with experts), bf16, validation every 500 steps; then generate from a tiny model with experts on the
# GPU and on the CPU in fp32 (greedy: the same tokens expected). Needs .data/tinyshakespeare.txt (carried).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt prepare_data generate
build/prepare_data --input .data/tinyshakespeare.txt --output /tmp/shakespeare --tokenizer char --format llmc > /dev/null
for run in dense moe; do
  echo "=== shakespeare $run $(date +%T)"
  extra=()
  [[ $run == moe ]] && extra=(--set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2)
  t0=$SECONDS
  timeout 200 build/train_gpt examples/configs/shakespeare_char.toml --set data.path=/tmp/shakespeare.tok --set train.steps=2000 \
    --set log.val_batches=16 --set checkpoint.dir=/tmp/ck_$run --set log.every=500 "${extra[@]}" 2>&1 | grep -E "experts:|parameters:|^step .*(val|/2000 \| loss)"
  echo "$run: $((SECONDS - t0)) s"
done
echo "=== generate $(date +%T)"
timeout 100 build/train_gpt examples/configs/tiny.toml --set train.device=cuda --set train.steps=100 --set moe.experts=4 \
  --set checkpoint.dir=/tmp/ck_tiny_moe --set log.every=100 2>&1 | grep -E "^step +100/100 \| loss"
for dev in cuda cpu; do
  timeout 60 build/generate /tmp/ck_tiny_moe --prompt "1 2 3" --prompt "4 5" --tokens 12 --temperature 0 --device $dev --precision fp32 2>/dev/null
done
timeout 60 build/generate /tmp/ck_moe --prompt "ROMEO:" --tokens 120 --temperature 0.8 --top-k 40 --device cuda 2>/dev/null | tail -8
echo "=== done $(date +%T)"

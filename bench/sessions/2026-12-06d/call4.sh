#!/usr/bin/env bash
# Session call 4 (one GPU, the device time left after call 3): GELU at MLP width 90 on the GPU
# against the CPU in fp32; Llama's block (RMSNorm, rope, SwiGLU at width 90) in bf16 with and
# without CUDA graphs, and in fp16. Losses of 8 deterministic steps printed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt > /dev/null && echo "built ${SECONDS}s"
L="--set model.norm=rmsnorm --set model.position_embedding=rope --set model.rope_theta=500 --set model.mlp=swiglu"
L="$L --set model.ffn_hidden_size=90 --set train.steps=8 --set log.every=1 --set train.deterministic=true --set model.dropout=0"
G="--set model.ffn_hidden_size=90 --set train.steps=8 --set log.every=1 --set train.deterministic=true"
f() {
  timeout 40 build/train_gpt examples/configs/tiny.toml "$@" 2>&1 | grep -E '^step +[0-9]+/8 \| loss|cuda graphs' |
    awk '/cuda graphs/ {print; next} {printf "%s ", $5} END {print ""}'
}
echo "gelu90 cpu: $(f $G --set train.device=cpu --set train.precision=fp32)"
echo "gelu90 cuda: $(f $G --set train.device=cuda --set train.precision=fp32)"
echo "llama bf16 graphs: $(f $L --set train.device=cuda --set train.precision=bf16 --set train.cuda_graphs=true)"
echo "llama bf16 no graphs: $(f $L --set train.device=cuda --set train.precision=bf16 --set train.cuda_graphs=false)"
echo "llama fp16: $(f $L --set train.device=cuda --set train.precision=fp16)"
echo "done ${SECONDS}s"

#!/usr/bin/env bash
# Issue 9 on one machine of eight H200s (the device tool's nvidia-h200-x8), in parts that each
# stay under the device's 10-minute limit per command. Build first (build/train_gpt for sm_90).
#   bash bench/issue9_x8.sh PART [PART...]
#   curve-base   GPT-2 1.3B on GPU 0: the one-GPU loss curves of layout_3d.sh (100 steps, global
#                batch 64 x 1024 tokens, micro-batch 4, and 2 for the bf16 noise scale)    ~4 min
#   curve-3d     1.3B, then ~7B, at (tensor, pipeline, data) = (2, 2, 2), ZeRO stage 1, 1F1B, 100
#                steps each; layout_3d.sh compares the 1.3B curve with curve-base's        ~4 min
#   scale-1.3b-N 1.3B data parallel (ZeRO stage 1) on 1 and N GPUs (N = 2, 4 or 8) against
#                PyTorch FSDP2, each against its own 1-GPU runs                          ~5 min each
#   scale-7b-2   ~7B on 2 GPUs: tensor = 2 against FSDP2                                      ~4 min
#   scale-7b-48  ~7B on 4 GPUs at (2, 2, 1) and 8 at (2, 2, 2) against FSDP2                  ~8 min
# Tables and logs go under $OUT (or ./gpu-out); docs/benchmarks.md records them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export OUT=$out NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x build/train_gpt ]] || { echo "no build/train_gpt: build first"; exit 1; }
B=(python3 bench/bench_gpt.py --steps 10 --warmup 3 --trellis build/train_gpt --torch-parallel fsdp)
for part in "$@"; do
  echo "=== $part $(date +%T)"
  case $part in
    curve-base) MODEL=1.3b RUNS="base base_mb" TIMEOUT=200 bash bench/layout_3d.sh ;;
    curve-3d)
      MODEL=1.3b NP=8 TP=2 PP=2 RUNS=3d TIMEOUT=150 bash bench/layout_3d.sh
      cp "$out/layout_3d/layout_3d.md" "$out/layout_3d_1.3b.md"
      MODEL=7b NP=8 TP=2 PP=2 RUNS=3d TIMEOUT=240 bash bench/layout_3d.sh ;;
    scale-1.3b-2 | scale-1.3b-4 | scale-1.3b-8)
      timeout 580 "${B[@]}" --models 1.3b --micro-batch 16 --data-parallel "${part##*-}" --trellis-set zero.stage=1 \
        --out "$out/scale_1.3b_${part##*-}.md" ;;
    scale-7b-2)
      timeout 580 "${B[@]}" --models 7b --micro-batch 4 --data-parallel 2 --skip-single --trellis-layout 2,1 \
        --out "$out/scale_7b_2.md" ;;
    scale-7b-48)
      timeout 580 "${B[@]}" --models 7b --micro-batch 4 --data-parallel 4,8 --skip-single --trellis-layout 2,2 \
        --out "$out/scale_7b_48.md" ;;
    *) echo "unknown part $part (curve-base, curve-3d, scale-1.3b-2, scale-1.3b-4, scale-1.3b-8, scale-7b-2, scale-7b-48)"
       exit 1 ;;
  esac
done
echo "=== done $(date +%T)"

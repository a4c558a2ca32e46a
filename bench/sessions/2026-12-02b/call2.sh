#!/usr/bin/env bash
# Session call 2 (1×H200): cuDNN 9.19 (the wheel PyTorch loads) against the machine's: env_report's
# new cuDNN line on each; attn_plans_probe.cpp (seventeenth session) on 9.19, for a plan faster than
# the heuristic's first; then bench_gpt 1.3B against PyTorch with Trellis on PyTorch's cuBLAS/cuDNN
# (--trellis-libs torch), three rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt env_report
sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cudnn_dir=$sp/nvidia/cudnn/lib
build/env_report | grep -E "cuBLAS|cuDNN"
LD_LIBRARY_PATH=$cudnn_dir:$sp/nvidia/cu13/lib:$LD_LIBRARY_PATH build/env_report | grep -E "cuBLAS|cuDNN"
echo "=== probe $(date +%T)"
inc=$(dirname "$(find /usr/local/cuda/include /usr/include -name cudnn.h 2>/dev/null | head -1)")
g++ -O2 -std=c++20 -w -I third_party/cudnn-frontend/include -I "$inc" -I /usr/local/cuda/include \
  bench/sessions/2026-12-01c/attn_plans_probe.cpp -L /usr/local/cuda/lib64 -lcudnn -lnvrtc -lcuda -lcudart -ldl -o /tmp/attn_probe || exit 1
LD_LIBRARY_PATH=$cudnn_dir:$LD_LIBRARY_PATH timeout 150 /tmp/attn_probe > "$out/attn_plans.log" 2>&1; echo "probe exit $?"
head -60 "$out/attn_plans.log"
echo "=== bench 1.3B $(date +%T)"
timeout 400 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b \
  --micro-batch 16 --rounds 3 --trellis-libs torch --out "$out/bench_1.3b.md" > "$out/bench_1.3b.log" 2>&1
echo "bench exit $?"; cat "$out/bench_1.3b.md"; tail -3 "$out/bench_1.3b.log"
echo "=== done $(date +%T)"

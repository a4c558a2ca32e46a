#!/usr/bin/env bash
# Session call 1 (1×H200): attn_plans_probe.cpp — every cuDNN SDPA plan (heuristics A, B, FALLBACK)
# and every knob combination of their engines, at GPT-2 1.3B / 350M / 124M's attention shapes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
inc=$(dirname "$(find /usr/local/cuda/include /usr/include -name cudnn.h 2>/dev/null | head -1)")
echo "cudnn.h in $inc"
g++ -O2 -std=c++20 -w -I third_party/cudnn-frontend/include -I "$inc" -I /usr/local/cuda/include \
  bench/sessions/2026-12-01c/attn_plans_probe.cpp -L /usr/local/cuda/lib64 -lcudnn -lnvrtc -lcuda -lcudart -ldl -o /tmp/attn_probe || exit 1
timeout 400 /tmp/attn_probe 2>&1 | tee "$out/attn_plans.log" | head -300
echo "=== done $(date +%T)"

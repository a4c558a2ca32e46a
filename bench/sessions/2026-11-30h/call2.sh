#!/usr/bin/env bash
# Session call 2 (1×H200): cutlass_gelu_probe.cu — CUTLASS 3 GEMMs with the GELU (forward, with the
# pre-activation stored) or its derivative (backward) fused in the epilogue, against cuBLASLt's
# GELU_AUX_BIAS / DGELU, at GPT-2 1.3B's MLP shapes. Needs third_party/cutlass (carried).
#   SCHED 0: cooperative 128x256x64, cluster 2x1   SCHED 1: ping-pong 128x128x64, cluster 2x1
#   SCHED 2: cooperative 256x128x64, cluster 1x2   SCHED 3: ping-pong 64x256x64, cluster 1x2
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
[[ -d third_party ]] || ln -sfn "$(cd .. && pwd)/third_party" third_party
src=bench/sessions/2026-11-30h/cutlass_gelu_probe.cu
echo "=== build $(date +%T)"
for mode in 0 1; do for sched in 0 1 2 3; do
  nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DMODE=$mode -DSCHED=$sched \
    -Ithird_party/cutlass/include $src -lcublasLt -o /tmp/probe_$mode$sched > "$out/build_$mode$sched.log" 2>&1 &
done; done
wait
echo "=== run $(date +%T)"
for mode in 0 1; do for sched in 0 1 2 3; do
  if [[ -x /tmp/probe_$mode$sched ]]; then timeout 60 /tmp/probe_$mode$sched
  else echo "MODE $mode SCHED $sched: build failed"; grep -m3 error "$out/build_$mode$sched.log"; fi
done; done
echo "=== done $(date +%T)"

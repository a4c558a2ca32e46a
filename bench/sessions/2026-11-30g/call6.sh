#!/usr/bin/env bash
# Session call 6 (1×H200; the 2×H200 kind was no longer lent): gelu_gemm_probe.cu, the GELU-epilogue
# GEMMs of GPT-2 1.3B micro-batch 16 against plain and bias-only epilogues, every heuristic candidate
# (up to 64) timed, on random-looking data. Issue 8: is there a faster cuBLASLt algorithm than the
# heuristic's first pick?
set -uo pipefail
cd "$(dirname "$0")"
nvcc -O2 -arch=sm_90 gelu_gemm_probe.cu -lcublasLt -o /tmp/gelu_gemm_probe || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
/tmp/gelu_gemm_probe
/tmp/gelu_gemm_probe
echo "=== done $(date +%T)"

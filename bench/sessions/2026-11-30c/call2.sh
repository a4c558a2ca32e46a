#!/usr/bin/env bash
# Session call 2 (2×H200, right after call 1 on the same machine, so the build is reused): tensor = 2
# at 1.3B (micro-batch 8) at tensor_comm_chunks 1, 2, 4 and with sequence parallelism
# (bench/tensor_bench.sh), then data = 2 at 350M (micro-batch 16) with the reduction's variants
# (bench/data_bench.sh).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== tensor $(date +%T)"
CHUNKS="1 2 4" bash bench/tensor_bench.sh build/train_gpt
echo "=== data $(date +%T)"
bash bench/data_bench.sh build/train_gpt
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 4 (1×H200): 1.3B, the library effect beside the reference in one call. Each round:
# bench_gpt with Trellis on PyTorch's cuBLAS/cuDNN (cuDNN 9.19) against PyTorch, then Trellis alone
# on the machine's libraries (cuDNN 9.14).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt --models 1.3b --micro-batch 16"
for r in 1 2; do
  echo "=== round $r $(date +%T)"
  timeout 120 $B --trellis-libs torch --out "$out/torch_libs_$r.md" > "$out/torch_libs_$r.log" 2>&1
  echo "exit $?"; grep -E "^\| [0-9]" "$out/torch_libs_$r.md"
  timeout 60 $B --skip-torch --out "$out/system_libs_$r.md" > "$out/system_libs_$r.log" 2>&1
  echo "exit $?"; grep -E "^\| [0-9]" "$out/system_libs_$r.md"
done
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 7 (1×H200): activation checkpointing "elementwise" against none, GPT-2 1.3B
# micro-batch 16, 20 steps each (medians of steps 6-20): step time, peak memory, activation arenas.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j16 --target train_gpt >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
source bench/gpt_toml.sh
gpt_toml call7 24 2048 16 16 20 > "$out/m.toml"
for mode in none elementwise; do
  timeout 60 build/train_gpt "$out/m.toml" --set train.checkpointing=$mode --set log.metrics_file="$out/$mode.jsonl" > "$out/$mode.log" 2>&1 || echo "$mode FAILED"
  python3 - "$out/$mode.jsonl" $mode <<'PY'
import json, sys, statistics as st
recs = [r for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r][5:]
print(f"{sys.argv[2]}: median step {st.median(r['step_ms'] for r in recs):.1f} ms, peak {max(r['peak_mem_bytes'] for r in recs) / 2**30:.2f} GiB, loss at 20 {recs[-1]['loss']:.4f}")
PY
  grep -h "activation arenas" "$out/$mode.log"
done

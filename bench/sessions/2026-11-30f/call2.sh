#!/usr/bin/env bash
# Session call 2 (2×H200): tensor = 2 with the batch split and ln2's backward summing the row-parallel
# projections' bias gradients. One GPU against tensor = 2 in deterministic mode (losses close); GPT-2
# 1.3B at micro-batch 8 (one GPU twice, tensor = 2 three times, the whole-batch path once, one traced
# step) and micro-batch 16 (tensor = 2 twice). Data = 2 at GPT-2 350M with f32 and bf16 gradient sums.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
losses() {
  python3 - "$out" "$@" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
runs = {n: [json.loads(x)["loss"] for x in open(f"{out}/{n}.jsonl") if '"step"' in x and '"loss"' in x] for n in names}
ref = runs[names[0]]
for n in names:
    d = max(abs(a - b) / abs(b) for a, b in zip(runs[n], ref)) if runs[n] else float("nan")
    print(f"{n}: {len(runs[n])} steps, losses of steps 1, 6, last {runs[n][0]:.6f} {runs[n][5]:.6f} {runs[n][-1]:.6f}; "
          f"max rel diff to {names[0]} {d:.2e}")
PY
}
echo "=== deterministic: one GPU, tensor = 2 $(date +%T)"
(
  bin=build/train_gpt; out=$out/det; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call2 6 1024 16 8 12 "deterministic = true" > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  losses one t2
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call2 24 2048 16 8 11 > "$out/base.toml"
  REPEAT=2 run one 1
  REPEAT=3 run t2 2 parallel.tensor=2
  run t2_whole 2 parallel.tensor=2 parallel.tensor_split_batch=false
  run t2_trace 2 parallel.tensor=2 log.trace_step=8 log.trace_file=$out/t2.json
  summary 3 one t2 t2_whole t2_trace
  python3 bench/trace_summary.py "$out/t2.rank0.json" 2>&1 | head -24
)
echo "=== tensor = 2, 1.3B micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor16; mkdir -p "$out"; TIMEOUT=120
  source bench/layout_runs.sh
  gpt_toml call2 24 2048 16 16 11 > "$out/base.toml"
  run one 1
  REPEAT=2 run t2 2 parallel.tensor=2
  summary 3 one t2
)
echo "=== data = 2, 350M micro-batch 16: gradients summed in f32 (default) and bf16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call2 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  REPEAT=2 run d2 2
  REPEAT=2 run d2_bf16 2 zero.reduce_dtype=bf16
  summary 5 one d2 d2_bf16
)
tar czf "$out/logs.tgz" -C "$out" det tensor tensor16 data && rm -rf "$out/det" "$out/tensor" "$out/tensor16" "$out/data"
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 4 (2×H200): ZeRO stage 1 at data = 2 with each bucket's gradient squares taken as soon
# as its reduce-scatter is waited for (beside the later buckets' reductions). Checks: deterministic
# data = 2 at stages 0 and 1 (same losses as call 3), CUDA parity tests. Speed: GPT-2 350M micro-batch
# 16, stage 0 and stage 1 against one GPU (layout_runs.sh), and against PyTorch DDP in the same call
# (bench_gpt.py --data-parallel 2, Trellis at stage 1, each framework with its own one-GPU run).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== parity $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
echo "=== deterministic data = 2, stages 0 and 1 $(date +%T)"
(
  bin=build/train_gpt; out=$out/det; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call4 6 1024 16 8 12 "deterministic = true" > "$out/base.toml"
  run d2 2
  run d2_z1 2 zero.stage=1
  losses d2 d2_z1
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call4 24 1024 16 16 25 > "$out/base.toml"
  run one 1
  REPEAT=2 run d2 2
  REPEAT=3 run d2_z1 2 zero.stage=1
  run one_after 1
  run z1_trace 2 zero.stage=1 log.trace_step=10 log.trace_file=$out/z1.json
  summary 5 one d2 d2_z1 one_after
  python3 bench/trace_summary.py "$out/z1.rank0.json" 2>&1 | head -4
  python3 - "$out/z1.rank0.json" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
t0 = min(e["ts"] for e in ev if e["tid"] == 0)
last = max(e["ts"] for e in ev if e["tid"] == 0 and e["name"].startswith("embedding_backward"))
for e in sorted(ev, key=lambda e: e["ts"]):
    if e["ts"] >= last - 300 and not e["name"].startswith(("adamw", "sum_squares", "peer all_gather 12.6")):
        print(f"  {'COMM ' if e['tid'] == 1 else '     '}{(e['ts'] - t0) / 1e3:8.3f} ms +{e['dur']:6.0f} us {e['name'][:50]}")
sq = [e for e in ev if e["name"].startswith("sum_squares")]
print(f"  squares: {len(sq)} ops from {(min(e['ts'] for e in sq) - t0) / 1e3:.3f} to {(max(e['ts'] + e['dur'] for e in sq) - t0) / 1e3:.3f} ms")
ad = [e for e in ev if e["name"].startswith("adamw")]
print(f"  adamw: {len(ad)} ops from {(min(e['ts'] for e in ad) - t0) / 1e3:.3f} to {(max(e['ts'] + e['dur'] for e in ad) - t0) / 1e3:.3f} ms")
print("  end of the step's last op:", max(e["ts"] + e["dur"] - t0 for e in ev) / 1e3, "ms")
PY
)
echo "=== against PyTorch DDP $(date +%T)"
timeout 400 python3 bench/bench_gpt.py --models 350m --micro-batch 16 --data-parallel 2 --steps 20 --warmup 5 \
  --trellis build/train_gpt --trellis-set zero.stage=1 --out "$out/ddp.md" > "$out/ddp.log" 2>&1
echo "bench_gpt exit $?"
cat "$out/ddp.md" 2>/dev/null || tail -20 "$out/ddp.log"
tar czf "$out/logs.tgz" -C "$out" det data parity.log ddp.log && rm -rf "$out/det" "$out/data"
echo "=== done $(date +%T)"

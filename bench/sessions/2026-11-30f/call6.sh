#!/usr/bin/env bash
# Session call 6 (2×H200), ~6 min of device time left: does the last bucket's all-reduce now start
# before the gathered embedding rows are added (call 5's code)? Data = 2 at GPT-2 350M micro-batch 16,
# twice, and one traced step, with the tail of its timeline printed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call6 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  REPEAT=2 run d2 2
  run d2_trace 2 log.trace_step=10 log.trace_file=$out/d2.json
  summary 5 one d2 d2_trace
  python3 bench/trace_summary.py "$out/d2.rank0.json" | head -3
  python3 - "$out/d2.rank0.json" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
t0 = min(e["ts"] for e in ev if e["tid"] == 0)
last = max(e["ts"] for e in ev if e["tid"] == 0 and e["name"].startswith("embedding_backward"))
for e in sorted(ev, key=lambda e: e["ts"]):
    if last - 700 <= e["ts"] <= last + 1200:
        print(f"  {'COMM ' if e['tid'] == 1 else '     '}{(e['ts'] - t0) / 1e3:8.3f} ms +{e['dur']:5.0f} us {e['name'][:50]}")
PY
)
tar czf "$out/logs.tgz" -C "$out" data && rm -rf "$out/data"
echo "=== done $(date +%T)"

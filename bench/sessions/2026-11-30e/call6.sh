#!/usr/bin/env bash
# Session call 6 (2×H200): data = 2 at 350M micro-batch 16 with the bucket completed last split so that
# only its first parameters (the position embedding) are reduced after backward; one GPU and the
# unsplit setting's neighbour (NCCL) in the same call; the traced step's collectives listed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
mkdir -p "$out/traces"
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call6 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  run d2 2 log.trace_step=10 log.trace_file=$out/../traces/d2.json
  run d2_nccl 2 parallel.peer_all_reduce=false
  summary 5 one d2 d2_nccl
  grep -h "data parallel:" "$out/d2.log"
)
python3 - "$out/traces/d2.rank0.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
comp = sorted((e for e in ev if e.get("tid") == 0 and "dur" in e), key=lambda e: e["ts"])
t0 = comp[0]["ts"]
for e in sorted((e for e in ev if e.get("tid") == 1 and "dur" in e), key=lambda e: e["ts"]):
    print(f"  {e['name']:36s} start {(e['ts'] - t0) / 1e3:7.2f} ms, {e['dur'] / 1e3:5.2f} ms")
last = [c for c in comp if c["name"].startswith("embedding_backward")][-1]
print("embedding backward ends at", round((last["ts"] + last["dur"] - t0) / 1e3, 2), "ms; first op after it:",
      next((c["name"], round((c["ts"] - t0) / 1e3, 2)) for c in comp if c["ts"] > last["ts"] + last["dur"]))
PY
tar czf "$out/logs.tgz" -C "$out" data traces && rm -rf "$out/data" "$out/traces"
echo "=== done $(date +%T)"

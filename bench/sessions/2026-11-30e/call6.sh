#!/usr/bin/env bash
# Session call 6 (2×H200), after the review mends: comm_test at 2 ranks (the ready wait now flushes
# remote writes where the device offers it); data = 2 at 350M micro-batch 16 with the bucket
# completed last split so that only its first parameters are reduced after backward (against NCCL and
# one GPU; the traced step's collectives listed); tensor = 2 at 1.3B micro-batch 8 with the new
# default (tensor_comm_chunks auto = 2) against one GPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerAllReduce.*:NcclBandwidth.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED|OK|SKIPPED) |PEER|NCCL  |Failure|differ|no peer" "$out/comm_test.log" | head -30
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
  grep -h "data parallel:\|group: all-reduces" "$out/d2.log" "$out/d2_nccl.log"
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call6 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  summary 3 one t2
  grep -h "tensor parallel:\|group: all-reduces" "$out/t2.log"
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
tar czf "$out/logs.tgz" -C "$out" data tensor traces comm_test.log && rm -rf "$out/data" "$out/tensor" "$out/traces"
echo "=== done $(date +%T)"

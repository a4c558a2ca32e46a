#!/usr/bin/env bash
# Session call 3 (2×H200): call 2's code, and at ZeRO stages 1-2 the updated pieces all-gathered
# straight into the peer's parameter buffer (Communicator::share_gather_target: no receive slots;
# call 2's trace had the gathers, through the slots, at ~150 GB/s and 1.7 ms past AdamW). Checks: comm_test at 2 ranks (every peer op bitwise against NCCL), deterministic data = 2 at
# stages 0 and 1, peer and NCCL (same losses). Speed: GPT-2 350M micro-batch 16, data = 2 at stage 0
# and stage 1 (peer and NCCL), twice each, against one GPU; one traced stage-1 step.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 200 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='Nccl*:PeerCollectives.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ|not rank|no peer|busbw" "$out/comm_test.log" | head -20
echo "=== deterministic data = 2, stages 0 and 1 $(date +%T)"
(
  bin=build/train_gpt; out=$out/det; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call3 6 1024 16 8 12 "deterministic = true" > "$out/base.toml"
  run one 1
  run d2 2
  run d2_z1 2 zero.stage=1
  run d2_z1_nccl 2 zero.stage=1 parallel.peer_all_reduce=false
  losses d2 d2_z1 d2_z1_nccl one
  grep -h "group: " "$out/d2_z1.log" "$out/d2_z1_nccl.log"
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call3 24 1024 16 16 25 > "$out/base.toml"
  run one 1
  REPEAT=2 run d2 2
  REPEAT=3 run d2_z1 2 zero.stage=1
  run d2_z1_nccl 2 zero.stage=1 parallel.peer_all_reduce=false
  run one_after 1
  run d2_z2 2 zero.stage=2
  run z1_trace 2 zero.stage=1 log.trace_step=10 log.trace_file=$out/z1.json
  summary 5 one d2 d2_z1 d2_z1_nccl d2_z2 one_after
  python3 bench/trace_summary.py "$out/z1.rank0.json" 2>&1 | head -12
  python3 - "$out/z1.rank0.json" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
t0 = min(e["ts"] for e in ev if e["tid"] == 0)
last = max(e["ts"] for e in ev if e["tid"] == 0 and e["name"].startswith("embedding_backward"))
for e in sorted(ev, key=lambda e: e["ts"]):
    if e["ts"] >= last - 300:
        print(f"  {'COMM ' if e['tid'] == 1 else '     '}{(e['ts'] - t0) / 1e3:8.3f} ms +{e['dur']:6.0f} us {e['name'][:50]}")
print("  end of the step's last op:", max(e["ts"] + e["dur"] - t0 for e in ev) / 1e3, "ms")
PY
)
tar czf "$out/logs.tgz" -C "$out" det data comm_test.log && rm -rf "$out/det" "$out/data"
echo "=== done $(date +%T)"

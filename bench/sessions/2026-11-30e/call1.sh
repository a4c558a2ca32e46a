#!/usr/bin/env bash
# Session call 1 (2×H200): the peer all-reduce (copy engines over NVLink, core/cuda/peer_all_reduce.h).
# comm_test at 2 ranks (every device op, peer against NCCL bitwise, 256 MiB bandwidth of both), then
# tensor = 2 at 1.3B micro-batch 8 and data = 2 at 350M micro-batch 16, each with the peer path (the
# default), with NCCL (parallel.peer_all_reduce = false) and one GPU; the losses side by side.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerAllReduce.*:NcclBandwidth.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED|OK|SKIPPED) |PEER|NCCL  |Failure|differ|no peer" "$out/comm_test.log" | head -30

losses() {
  python3 - "$out" "$@" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
for n in names:
    try:
        l = [json.loads(x)["loss"] for x in open(f"{out}/{n}.jsonl") if '"step"' in x and '"loss"' in x]
        print(n, "losses of steps 1, 5, last:", [l[0], l[4], l[-1]])
    except Exception as e:
        print(n, "no losses:", e)
PY
}
mkdir -p "$out/traces"
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call1 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2 log.trace_step=6 log.trace_file=$out/../traces/t2.json
  run t2_nccl 2 parallel.tensor=2 parallel.peer_all_reduce=false
  run t2_c2 2 parallel.tensor=2 parallel.tensor_comm_chunks=2
  run t2_c4 2 parallel.tensor=2 parallel.tensor_comm_chunks=4
  summary 3 one t2 t2_nccl t2_c2 t2_c4
  losses t2 t2_nccl t2_c2
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call1 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  run d2 2 log.trace_step=10 log.trace_file=$out/../traces/d2.json
  run d2_nccl 2 parallel.peer_all_reduce=false
  summary 5 one d2 d2_nccl
  losses d2 d2_nccl
)
echo "=== traces $(date +%T)"
S="python3 bench/trace_summary.py --top 14"
$S "$out/traces/t2.rank0.json"
$S "$out/traces/d2.rank0.json"
tar czf "$out/traces.tgz" -C "$out" traces && rm -rf "$out/traces"
tar czf "$out/logs.tgz" -C "$out" data tensor comm_test.log && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

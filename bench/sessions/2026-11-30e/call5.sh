#!/usr/bin/env bash
# Session call 5 (2×H200): the peer all-reduce with 8000 KiB chunks instead of 8 MiB (call 2's sweep
# # timed 8000 KiB at 0.98 ms for 256 MiB, calls 3-4 timed 8 MiB at 1.23 ms). comm_test at 2 ranks;
# tensor = 2 at 1.3B micro-batch 8 (chunks 1 and 2) and data = 2 at 350M micro-batch 16, each with one
# GPU in the same call.
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
runs = {}
for n in names:
    try:
        runs[n] = [json.loads(x)["loss"] for x in open(f"{out}/{n}.jsonl") if '"step"' in x and '"loss"' in x]
        print(n, len(runs[n]), "steps, losses of steps 1, 5, last:", [runs[n][0], runs[n][4], runs[n][-1]])
    except Exception as e:
        print(n, "no losses:", e)
if len(runs) == 2:
    a, b = runs.values()
    print("bitwise equal:", a == b)
PY
}
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call5 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  run t2_c2 2 parallel.tensor=2 parallel.tensor_comm_chunks=2
  summary 3 one t2 t2_c2
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call5 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  run d2 2
  summary 5 one d2
)
tar czf "$out/logs.tgz" -C "$out" data tensor comm_test.log && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 4 (2×H200): the peer all-reduce with the first 4 chunks of a tensor waiting once for
# freed slots, later chunks each for the chunk 8 before (call 3 waited once per 8 chunks, which made
# a long tensor push each chunk only after the peer had added the one before). comm_test at 2 ranks; peer against NCCL end to end in deterministic
# mode (losses must be bitwise equal); tensor = 2 at 1.3B micro-batch 8, data = 2 at 350M
# micro-batch 16, each against NCCL (parallel.peer_all_reduce = false) and one GPU in the same call.
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
echo "=== deterministic, tensor = 2 and data = 2: peer against NCCL $(date +%T)"
(
  bin=build/train_gpt; out=$out/det; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call4 6 1024 16 8 12 "deterministic = true" > "$out/base.toml"
  run t2 2 parallel.tensor=2
  run t2_nccl 2 parallel.tensor=2 parallel.peer_all_reduce=false
  losses t2 t2_nccl
  run d2 2
  run d2_nccl 2 parallel.peer_all_reduce=false
  losses d2 d2_nccl
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call4 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  run t2_nccl 2 parallel.tensor=2 parallel.peer_all_reduce=false
  run t2_c2 2 parallel.tensor=2 parallel.tensor_comm_chunks=2
  summary 3 one t2 t2_nccl t2_c2
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call4 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  run d2 2
  run d2_nccl 2 parallel.peer_all_reduce=false
  summary 5 one d2 d2_nccl
)
tar czf "$out/logs.tgz" -C "$out" det data tensor comm_test.log && rm -rf "$out/det" "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

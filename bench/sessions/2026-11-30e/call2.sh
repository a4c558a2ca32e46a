#!/usr/bin/env bash
# Session call 2 (2×H200): the peer all-reduce with chunks on alternating copy streams. comm_test at
# 2 ranks with the defaults; a sweep of chunk size and copy streams (TRELLIS_PEER_CHUNK_KB,
# TRELLIS_PEER_COPY_STREAMS) read from the 256 MiB f32 / 32 MiB bf16 bandwidth lines; then tensor = 2
# (1.3B micro-batch 8) and data = 2 (350M micro-batch 16) with the fastest setting for 32 MiB bf16.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== comm_test $(date +%T)"
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerAllReduce.*:NcclBandwidth.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED|OK|SKIPPED) |PEER|NCCL  |Failure|differ|no peer" "$out/comm_test.log" | head -30
echo "=== sweep $(date +%T)"
best=""; best_us=1e9
for kb in 1024 2048 4096 8000; do
  for k in 1 2 3; do
    r=$(TRELLIS_PEER_CHUNK_KB=$kb TRELLIS_PEER_COPY_STREAMS=$k timeout 60 mpirun --allow-run-as-root -np 2 \
        -x NCCL_NVLS_ENABLE -x TRELLIS_PEER_CHUNK_KB -x TRELLIS_PEER_COPY_STREAMS build/tests/comm_test \
        --gtest_filter='NcclBandwidth.*' 2>&1 | grep "PEER")
    echo "chunk ${kb} KB, ${k} copy stream(s):"; echo "$r"
    us=$(echo "$r" | grep "bf16 32 MiB" | sed -E 's/.*: ([0-9.]+) us.*/\1/')
    if [[ -n $us ]] && python3 -c "import sys; sys.exit(0 if $us < $best_us else 1)"; then best_us=$us; best="$kb $k"; fi
  done
done
read -r KB K <<< "$best"
echo "best for 32 MiB bf16: chunk $KB KB, $K copy stream(s), $best_us us"
export TRELLIS_PEER_CHUNK_KB=$KB TRELLIS_PEER_COPY_STREAMS=$K
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
P="TRELLIS_PEER_CHUNK_KB=$KB TRELLIS_PEER_COPY_STREAMS=$K"
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call2 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  RUN_ENV="$P" run t2 2 parallel.tensor=2 log.trace_step=6 log.trace_file=$out/../traces/t2.json
  RUN_ENV="$P" run t2_c2 2 parallel.tensor=2 parallel.tensor_comm_chunks=2 log.trace_step=6 log.trace_file=$out/../traces/t2_c2.json
  run t2_nccl 2 parallel.tensor=2 parallel.peer_all_reduce=false
  summary 3 one t2 t2_c2 t2_nccl
  losses t2 t2_c2 t2_nccl
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call2 24 1024 16 16 15 > "$out/base.toml"
  T="log.trace_step=10"
  run one 1 $T log.trace_file=$out/../traces/d_one.json
  RUN_ENV="$P" run d2 2 $T log.trace_file=$out/../traces/d2.json
  run d2_nccl 2 parallel.peer_all_reduce=false $T log.trace_file=$out/../traces/d2_nccl.json
  summary 5 one d2 d2_nccl
)
echo "=== traces $(date +%T)"
S="python3 bench/trace_summary.py --top 8"
$S "$out/traces/t2.rank0.json"
$S "$out/traces/t2_c2.rank0.json"
$S "$out/traces/d2.rank0.json" --base "$out/traces/d_one.json" --top 12
$S "$out/traces/d2_nccl.rank0.json" --base "$out/traces/d_one.json" --top 12
tar czf "$out/traces.tgz" -C "$out" traces && rm -rf "$out/traces"
tar czf "$out/logs.tgz" -C "$out" data tensor comm_test.log && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

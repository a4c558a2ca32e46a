#!/usr/bin/env bash
# Session call 1 (2×H200): the tensor-parallel batch split (parallel.tensor_split_batch). Checks: CUDA
# parity tests, comm_test at 2 ranks, the PyTorch check; one GPU against tensor = 2 split and whole in
# deterministic mode (losses close, not bitwise: GEMMs of half the rows). Speed: GPT-2 1.3B micro-batch 8
# at tensor = 2, split (peer and NCCL) against whole (tensor_comm_chunks auto = 2), twice each, one
# traced step of the split run.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== parity $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
echo "=== comm_test $(date +%T)"
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerAllReduce.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ|no peer" "$out/comm_test.log" | head -20
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
echo "=== deterministic: one GPU, tensor = 2 split and whole $(date +%T)"
(
  bin=build/train_gpt; out=$out/det; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call1 6 1024 16 8 12 "deterministic = true" > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  run t2_whole 2 parallel.tensor=2 parallel.tensor_split_batch=false
  run t2_whole_nccl 2 parallel.tensor=2 parallel.tensor_split_batch=false parallel.peer_all_reduce=false
  losses one t2 t2_whole t2_whole_nccl
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call1 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  REPEAT=2 run t2 2 parallel.tensor=2
  REPEAT=2 run t2_whole 2 parallel.tensor=2 parallel.tensor_split_batch=false
  run t2_nccl 2 parallel.tensor=2 parallel.peer_all_reduce=false
  run t2_trace 2 parallel.tensor=2 log.trace_step=8 log.trace_file=$out/t2.json
  summary 3 one t2 t2_whole t2_nccl t2_trace
  grep -h "tensor parallel:\|group: all-reduces" "$out/t2.log"
  python3 bench/trace_summary.py "$out/t2.rank0.json" 2>&1 | head -40
)
tar czf "$out/logs.tgz" -C "$out" det tensor comm_test.log parity.log && rm -rf "$out/det" "$out/tensor"
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 1 (2×H200): checks of the last session's code that never ran on a GPU (the vocabulary-
# parallel module, CommHandle::absorb): CUDA parity tests, the PyTorch check, comm_test at 2 ranks, one
# tensor = 2 run. Then data = 2 (GPT-2 350M micro-batch 16) at ZeRO stage 0 and stage 1 (through NCCL),
# with each GPU's SM clock and power sampled every 100 ms: is the data = 2 step's slower compute the
# clock?
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== parity $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
echo "=== comm_test $(date +%T)"
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test --gtest_filter='Nccl*:PeerAllReduce.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ|no peer|bus bandwidth" "$out/comm_test.log" | head -20
# sampled NAME RANKS SET...: `run`, with nvidia-smi sampling both GPUs into $out/NAME.smi
sampled() {
  nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 100 > "$out/$1.smi" &
  local smi=$!
  run "$@"
  kill $smi; wait $smi 2>/dev/null
}
clocks() {
  python3 - "$out" "$@" <<'PY'
import statistics as st, sys
out = sys.argv[1]
for n in sys.argv[2:]:
    rows = [[float(x) for x in l.split(",")] for l in open(f"{out}/{n}.smi") if l.count(",") == 3]
    for g in (0, 1):
        busy = [r for r in rows if int(r[0]) == g and r[2] > 250]
        if busy:
            print(f"{n} GPU {g}: {len(busy)} busy samples, SM clock median {st.median(r[1] for r in busy):.0f} MHz "
                  f"(min {min(r[1] for r in busy):.0f}), power median {st.median(r[2] for r in busy):.0f} W, "
                  f"temperature max {max(r[3] for r in busy):.0f} C")
PY
}
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call1 24 1024 16 16 40 > "$out/base.toml"
  sampled one 1
  sampled d2 2
  sampled d2_z1 2 zero.stage=1
  sampled one_after 1
  sampled d2b 2
  summary 5 one d2 d2_z1 d2b one_after
  clocks one d2 d2_z1 d2b one_after
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call1 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  run t2_chunks 2 parallel.tensor=2 parallel.tensor_comm_chunks=2
  summary 3 one t2 t2_chunks
)
tar czf "$out/logs.tgz" -C "$out" data tensor comm_test.log parity.log && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

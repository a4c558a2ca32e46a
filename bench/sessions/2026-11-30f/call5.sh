#!/usr/bin/env bash
# Session call 5 (2×H200), the session's last: checks at the final code (CUDA parity tests, the PyTorch
# check, comm_test at 2 ranks); tensor = 2 at GPT-2 1.3B micro-batch 8 and 16; data = 2 at GPT-2 350M
# micro-batch 16 with the embedding rows gathered before the last bucket's all-reduce, three runs; and
# what running both GPUs at once costs by itself: two independent one-GPU runs at the same time.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== parity $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE build/tests/comm_test \
  --gtest_filter='NcclComm.*:PeerAllReduce.*' > "$out/comm_test.log" 2>&1
echo "comm_test exit $?"
grep -E "^\[ +(PASSED|FAILED) |Failure|differ" "$out/comm_test.log" | head -10
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call5 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  REPEAT=3 run d2 2
  summary 5 one d2
  echo "--- two one-GPU runs at once (GPU 0 and GPU 1)"
  for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g timeout 60 "$bin" "$out/base.toml" --set log.metrics_file="$out/pair$g.jsonl" > "$out/pair$g.log" 2>&1 &
  done
  wait
  run one_after 1
  python3 - "$out" <<'PY'
import json, statistics as st, sys
out = sys.argv[1]
def ms(name):
    recs = [json.loads(x) for x in open(f"{out}/{name}.jsonl")]
    return st.median(r["step_ms"] for r in recs if "step_ms" in r and r["step"] > 5)
one = [ms("one"), ms("one_after")]
for n in ("pair0", "pair1"):
    print(f"{n}: {ms(n):.1f} ms a step beside the other GPU's run, against {one[0]:.1f} / {one[1]:.1f} alone "
          f"({ms(n) / st.mean(one) - 1:+.1%})")
PY
)
echo "=== tensor = 2, 1.3B micro-batch 8 and 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call5 24 2048 16 8 11 > "$out/base.toml"
  run one 1
  REPEAT=2 run t2 2 parallel.tensor=2
  summary 3 one t2
)
(
  bin=build/train_gpt; out=$out/tensor16; mkdir -p "$out"; TIMEOUT=120
  source bench/layout_runs.sh
  gpt_toml call5 24 2048 16 16 11 > "$out/base.toml"
  run one 1
  run t2 2 parallel.tensor=2
  summary 3 one t2
)
tar czf "$out/logs.tgz" -C "$out" data tensor tensor16 parity.log comm_test.log && rm -rf "$out/data" "$out/tensor" "$out/tensor16"
echo "=== done $(date +%T)"

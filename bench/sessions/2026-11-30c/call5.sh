#!/usr/bin/env bash
# Session call 5 (2×H200), the session's last (~6 min of device time left): the vectorized gradient
# sums of squares, the layer-norm backward computing dy and xhat once, and the layer-norm forward
# with w and b staged in shared memory, checked and measured.
# GPU 0: CUDA parity tests, the PyTorch check on the GPU, determinism, the 1.3B and 350M per-op
# profiles, then 124M (micro-batch 32) against PyTorch. GPU 1 at the same time: 350M and 1.3B
# (micro-batch 16) against PyTorch. Then data = 2 at 350M with the defaults (zero.bucket_mb = 200).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis

B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
checks() {
  export CUDA_VISIBLE_DEVICES=0
  echo "=== [gpu0] parity $(date +%T)"
  timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "[gpu0] parity exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -30
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  for i in 1 2; do
    timeout 120 build/train_gpt examples/configs/tiny.toml --set train.precision=bf16 --set train.deterministic=true \
      --set train.global_batch=16 --set train.steps=50 --set log.metrics_file=$out/det$i.jsonl > /dev/null 2>&1
  done
  python3 - "$out" <<'PY'
import json, sys
l = [[json.loads(x).get("loss") for x in open(f"{sys.argv[1]}/det{i}.jsonl") if '"step"' in x] for i in (1, 2)]
print("[gpu0] deterministic bf16 GPU runs bitwise equal:", l[0] == l[1], len(l[0]), "steps, final loss", l[0][-1])
PY
  P="--set log.profile_ops=true --set train.steps=6"
  L24="--set model.n_layers=24 --set model.n_heads=16 --set train.micro_batch=16"
  echo "=== [gpu0] profiles $(date +%T)"
  timeout 100 build/train_gpt bench/profile_124m.toml $P $L24 --set model.d_model=2048 > "$out/profile_1.3b.log" 2>&1; echo "[gpu0] 1.3b exit $?"
  timeout 100 build/train_gpt bench/profile_124m.toml $P $L24 --set model.d_model=1024 > "$out/profile_350m.log" 2>&1; echo "[gpu0] 350m exit $?"
  for n in 1.3b 350m; do echo "--- $n"; grep -E "^step" "$out/profile_$n.log" | tail -1 | cut -c1-160; sed -n '/per-op device time/,$p' "$out/profile_$n.log" | head -40; done
  echo "=== [gpu0] bench 124m $(date +%T)"
  timeout 150 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" --json "$out/bench_124m.json" 2>&1 | grep -E "tok/s|^\| [0-9]|rror"
  echo "=== [gpu0] done $(date +%T)"
}
checks > "$out/checks.log" 2>&1 &
checks_pid=$!

export CUDA_VISIBLE_DEVICES=1
echo "=== [gpu1] bench bf16 $(date +%T)"
timeout 300 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" --json "$out/bench_350m_1.3b.json" 2>&1 | grep -E "tok/s|^\| [0-9]|rror"
wait $checks_pid
cat "$out/checks.log"
unset CUDA_VISIBLE_DEVICES
echo "=== data = 2 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=45
  source bench/gpt_toml.sh
  source bench/layout_runs.sh
  gpt_toml call5 24 1024 16 16 20 > "$out/base.toml"
  run one 1
  run d2 2
  summary 5 one d2
)
echo "=== done $(date +%T)"

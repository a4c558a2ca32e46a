#!/usr/bin/env bash
# Session call 3 (2×H200): the layer-norm backward through a cp.async ring and the residual adds as
# GEMM epilogues (commit named in docs/benchmarks.md), checked and measured as in call 1.
# GPU 0: the CUDA parity tests, the PyTorch check on the GPU, determinism, per-op profiles of 1.3B,
# 350M and 124M. GPU 1 at the same time: 124M (micro-batch 32), 350M and 1.3B (16) against PyTorch
# in bf16, then Trellis in fp16.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis

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
  timeout 100 build/train_gpt bench/profile_124m.toml $P > "$out/profile_124m.log" 2>&1; echo "[gpu0] 124m exit $?"
  for n in 1.3b 350m 124m; do echo "--- $n"; grep -E "^step" "$out/profile_$n.log" | tail -1 | cut -c1-160; sed -n '/per-op device time/,$p' "$out/profile_$n.log" | head -40; done
  echo "=== [gpu0] done $(date +%T)"
}
checks > "$out/checks.log" 2>&1 &
checks_pid=$!

export CUDA_VISIBLE_DEVICES=1
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
echo "=== [gpu1] bench bf16 $(date +%T)"
timeout 150 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" --json "$out/bench_124m.json" 2>&1 | grep -E "tok/s|^\| [0-9]|rror"
timeout 300 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" --json "$out/bench_350m_1.3b.json" 2>&1 | grep -E "tok/s|^\| [0-9]|rror"
echo "=== [gpu1] Trellis fp16 $(date +%T)"
timeout 90 $B --models 124m --micro-batch 32 --precision fp16 --skip-torch 2>&1 | grep -E "tok/s|rror"
timeout 90 $B --models 350m,1.3b --micro-batch 16 --precision fp16 --skip-torch 2>&1 | grep -E "tok/s|rror"
wait $checks_pid
cat "$out/checks.log"
echo "=== done $(date +%T)"

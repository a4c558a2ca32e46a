#!/usr/bin/env bash
# Session call 1 (2×H200): the checks on GPU 0 while ncu reads the layer-norm backward and bias-gradient
# kernels on GPU 1 (GPT-2 1.3B shapes); then one-step traces (log.trace_step) at data = 2 (350M) and
# tensor = 2 (1.3B, micro-batch 8) with their one-GPU bases, and parallel.gemm_sm_reserve tried.
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
  echo "=== [gpu0] done $(date +%T)"
}
checks > "$out/checks.log" 2>&1 &
checks_pid=$!

export CUDA_VISIBLE_DEVICES=1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "=== [gpu1] ncu ($NCU) $(date +%T)"
L13="--set model.n_layers=24 --set model.n_heads=16 --set train.micro_batch=16 --set model.d_model=2048 --set train.steps=1"
timeout 240 "$NCU" --clock-control none --set full -k regex:"layernorm_backward_fused|column_partials|column_finalize" -c 6 \
  build/train_gpt bench/profile_124m.toml $L13 > "$out/ncu.txt" 2>&1; echo "[gpu1] ncu exit $?"
grep -E "layernorm_backward_fused|column_partials|column_finalize|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Dynamic Shared|Waves Per SM|Grid Size|Block Size" "$out/ncu.txt" | head -90
wait $checks_pid
cat "$out/checks.log"
unset CUDA_VISIBLE_DEVICES

mkdir -p "$out/traces"
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call1 24 1024 16 16 20 > "$out/base.toml"
  T="log.trace_step=10"
  run one 1 $T log.trace_file=$out/../traces/d_one.json
  run d2 2 $T log.trace_file=$out/../traces/d2.json
  run d2_r8 2 parallel.gemm_sm_reserve=8
  run d2_r16 2 parallel.gemm_sm_reserve=16 $T log.trace_file=$out/../traces/d2_r16.json
  run d2_r32 2 parallel.gemm_sm_reserve=32
  RUN_ENV="NCCL_MAX_CTAS=8" run d2_c8_r8 2 parallel.gemm_sm_reserve=8
  RUN_ENV="NCCL_MAX_CTAS=16" run d2_c16_r16 2 parallel.gemm_sm_reserve=16
  summary 5 one d2 d2_r8 d2_r16 d2_r32 d2_c8_r8 d2_c16_r16
)
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call1 24 2048 16 8 11 > "$out/base.toml"
  T="log.trace_step=6"
  run one 1 $T log.trace_file=$out/../traces/t_one.json
  run t2 2 parallel.tensor=2 $T log.trace_file=$out/../traces/t2.json
  run t2_r16 2 parallel.tensor=2 parallel.gemm_sm_reserve=16
  run t2_sp 2 parallel.tensor=2 parallel.sequence_parallel=true $T log.trace_file=$out/../traces/t2_sp.json
  summary 3 one t2 t2_r16 t2_sp
)
echo "=== traces $(date +%T)"
S="python3 bench/trace_summary.py --top 30"
ls "$out/traces"
$S "$out/traces/d2.rank0.json" --base "$out/traces/d_one.json"
$S "$out/traces/d2_r16.rank0.json" --base "$out/traces/d_one.json" --top 12
$S "$out/traces/t2.rank0.json" --top 30
$S "$out/traces/t2_sp.rank0.json" --top 20
$S "$out/traces/t_one.json" --top 12
tar czf "$out/traces.tgz" -C "$out" traces && rm -rf "$out/traces"
tar czf "$out/logs.tgz" -C "$out" data tensor parity.log && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

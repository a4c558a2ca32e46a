#!/usr/bin/env bash
# Session call 2 (2×H200): tensor-parallel backward with the row-parallel weight gradients deferred
# beside the column-parallel collectives; the layer-norm backward's partials as 16-byte stores;
# TRELLIS_CUDNN_TUNE (cuDNN attention plans timed); gemm_sm_reserve with TRELLIS_MATMUL_TUNE.
# GPU 0: checks, then 1.3B against PyTorch. GPU 1: 1.3B per-op profiles without and with
# TRELLIS_CUDNN_TUNE. Then tensor = 2 (1.3B mb8) and data = 2 (350M mb16) runs.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis

B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  echo "=== [gpu0] parity $(date +%T)"
  timeout 150 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "[gpu0] parity exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -30
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  echo "=== [gpu0] bench 1.3b $(date +%T)"
  timeout 240 $B --models 1.3b --micro-batch 16 --out "$out/bench_1.3b.md" --json "$out/bench_1.3b.json" 2>&1 | grep -E "tok/s|^\| [0-9]|rror"
  echo "=== [gpu0] done $(date +%T)"
}
gpu0 > "$out/gpu0.log" 2>&1 &
gpu0_pid=$!

export CUDA_VISIBLE_DEVICES=1
P="--set log.profile_ops=true --set train.steps=6 --set model.n_layers=24 --set model.n_heads=16 --set train.micro_batch=16 --set model.d_model=2048"
echo "=== [gpu1] profiles $(date +%T)"
timeout 120 build/train_gpt bench/profile_124m.toml $P > "$out/profile_1.3b.log" 2>&1; echo "[gpu1] default exit $?"
TRELLIS_CUDNN_TUNE=1 timeout 120 build/train_gpt bench/profile_124m.toml $P > "$out/profile_1.3b_tune.log" 2>&1; echo "[gpu1] cudnn tune exit $?"
for n in 1.3b 1.3b_tune; do echo "--- $n"; grep -E "^step|cudnn" "$out/profile_$n.log" | tail -3 | cut -c1-160; sed -n '/per-op device time/,$p' "$out/profile_$n.log" | head -32; done
wait $gpu0_pid
cat "$out/gpu0.log"
unset CUDA_VISIBLE_DEVICES

mkdir -p "$out/traces"
echo "=== tensor = 2, 1.3B micro-batch 8 $(date +%T)"
(
  bin=build/train_gpt; out=$out/tensor; mkdir -p "$out"; TIMEOUT=90
  source bench/layout_runs.sh
  gpt_toml call2 24 2048 16 8 11 > "$out/base.toml"
  T="log.trace_step=6"
  run one 1
  run t2 2 parallel.tensor=2 $T log.trace_file=$out/../traces/t2.json
  run t2_sp 2 parallel.tensor=2 parallel.sequence_parallel=true $T log.trace_file=$out/../traces/t2_sp.json
  run t2_c2 2 parallel.tensor=2 parallel.tensor_comm_chunks=2
  RUN_ENV="NCCL_MIN_NCHANNELS=32" run t2_ch32 2 parallel.tensor=2
  RUN_ENV="NCCL_PROTO=Simple" run t2_simple 2 parallel.tensor=2
  RUN_ENV="NCCL_PROTO=LL128" run t2_ll128 2 parallel.tensor=2
  summary 3 one t2 t2_sp t2_c2 t2_ch32 t2_simple t2_ll128
)
echo "=== data = 2, 350M micro-batch 16 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=60
  source bench/layout_runs.sh
  gpt_toml call2 24 1024 16 16 20 > "$out/base.toml"
  run one 1
  run d2 2
  RUN_ENV="TRELLIS_MATMUL_TUNE=1" run d2_tune 2
  RUN_ENV="TRELLIS_MATMUL_TUNE=1" run d2_tune_r16 2 parallel.gemm_sm_reserve=16
  RUN_ENV="TRELLIS_MATMUL_TUNE=1 NCCL_MAX_CTAS=4" run d2_tune_c4_r4 2 parallel.gemm_sm_reserve=4
  RUN_ENV="TRELLIS_CUDNN_TUNE=1" run d2_cudnn_tune 2
  summary 5 one d2 d2_tune d2_tune_r16 d2_tune_c4_r4 d2_cudnn_tune
)
echo "=== traces $(date +%T)"
S="python3 bench/trace_summary.py"
$S "$out/traces/t2.rank0.json" --top 25
$S "$out/traces/t2_sp.rank0.json" --top 16
tar czf "$out/traces.tgz" -C "$out" traces && rm -rf "$out/traces"
tar czf "$out/logs.tgz" -C "$out" data tensor parity.log profile_1.3b.log profile_1.3b_tune.log && rm -rf "$out/data" "$out/tensor"
echo "=== done $(date +%T)"

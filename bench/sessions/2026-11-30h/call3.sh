#!/usr/bin/env bash
# Session call 3 (2×H200): the MLP's GELU-fused GEMMs as CUTLASS kernels (core/cuda/cutlass_gelu_gemm.cu).
# GPU 0: CUDA parity tests (MatmulGeluCutlass among them), the PyTorch check, then bench_gpt 124M.
# GPU 1: GPT-2 1.3B micro-batch 16 with TRELLIS_CUTLASS=0 (cuBLASLt epilogues) and with CUTLASS,
# alternating, a per-op profile with CUTLASS, then bench_gpt 350M and 1.3B. GPU 0 then runs
# cutlass_plain_probe.cu (CUTLASS against cuBLASLt for 1.3B's plain GEMMs) and fp16 at 1.3B.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
[[ -d third_party/cutlass ]] || { echo "no third_party/cutlass"; exit 1; }
build_trellis
grep -E "CUTLASS GEMMs" "$out/build.log"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  local probe=bench/sessions/2026-11-30h/cutlass_plain_probe.cu mode sched
  for mode in 2 3 4; do for sched in 0 1; do  # built while the tests run; waited for below
    nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -DMODE=$mode -DSCHED=$sched \
      -Ithird_party/cutlass/include $probe -lcublasLt -o /tmp/pp_$mode$sched > "$out/pp_$mode$sched.log" 2>&1 &
  done; done
  echo "=== [gpu0] parity $(date +%T)"
  timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure|differ|MatmulGeluCutlass" "$out/parity.log" | head -20
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  echo "=== [gpu0] bench 124M $(date +%T)"
  timeout 200 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" 2>&1 | grep -E "^\| [0-9]|rror"
  echo "=== [gpu0] plain GEMM probes $(date +%T)"
  wait  # the probes' builds
  for p in /tmp/pp_20 /tmp/pp_21 /tmp/pp_30 /tmp/pp_31 /tmp/pp_40 /tmp/pp_41; do
    [[ -x $p ]] && timeout 60 $p || echo "$p: not built"
  done
  echo "=== [gpu0] fp16 1.3B (Trellis only) $(date +%T)"
  timeout 150 $B --models 1.3b --micro-batch 16 --skip-torch --precision fp16 2>&1 | grep -E "^\| [0-9]|rror"
  echo "=== [gpu0] done $(date +%T)"
}
gpu0 > "$out/gpu0.log" 2>&1 &
pid0=$!
export CUDA_VISIBLE_DEVICES=1
echo "=== [gpu1] 1.3B A/B $(date +%T)"
(
  bin=build/train_gpt; out=$out/ab; mkdir -p "$out"; TIMEOUT=80
  source bench/layout_runs.sh
  run() {  # one GPU (CUDA_VISIBLE_DEVICES=1 as set above), RUN_ENV as in layout_runs
    local name=$1; shift
    local sets=() s
    for s in "$@"; do sets+=(--set "$s"); done
    env ${RUN_ENV:-} timeout "$TIMEOUT" "$bin" "$out/base.toml" --set log.metrics_file="$out/$name.jsonl" "${sets[@]}" \
      > "$out/$name.log" 2>&1 || { echo "    $name FAILED"; grep -iE "error|fatal" "$out/$name.log" | head -3; }
  }
  gpt_toml call3 24 2048 16 16 12 > "$out/base.toml"
  RUN_ENV="TRELLIS_CUTLASS=0" run one
  run cutlass
  RUN_ENV="TRELLIS_CUTLASS=0" run lt2
  run cutlass2
  summary 4 one cutlass lt2 cutlass2
  losses one cutlass
  run prof log.profile_ops=true
  sed -n '/per-op device time/,$p' "$out/prof.log" | head -32
)
echo "=== [gpu1] bench 350M, 1.3B $(date +%T)"
timeout 330 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" 2>&1 | grep -E "^\| [0-9]|rror"
wait $pid0
cat "$out/gpu0.log"
tar czf "$out/logs.tgz" -C "$out" ab parity.log && rm -rf "$out/ab"
echo "=== done $(date +%T)"

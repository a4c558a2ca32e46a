#!/usr/bin/env bash
# ZeRO stages 0-3 on 2 GPUs (issue 7, performance and memory):
#   bench/zero_bench.sh [train_gpt binary, default build/train_gpt]
# Part 1 (PART=1 or all): GPT-2 1.3B (24 layers, d_model 2048, 16 heads, seq 1024, bf16, random
# tokens), micro-batch $MB (default 8), data = 2, each stage 0-3: $WARMUP (3) untimed + $STEPS (8)
# timed steps; medians of rank 0's metrics (tokens_per_s, step_ms, peak_mem_bytes). Model state:
# the start record's model_state_bytes_allocated (what rank 0's store and optimizer hold, padding
# and the buckets kept whole included) and zero_slot_bytes, against the formula
# (model_state_bytes_per_rank: bf16 with f32 gradients and split masters 16Ψ, 6Ψ + 14Ψ/N, 2Ψ + 14Ψ/N,
# 16Ψ/N; before the split masters, 13th session, 18Ψ, 6Ψ + 16Ψ/N, 2Ψ + 16Ψ/N, 18Ψ/N) and its
# prediction for N = 8, 64, 512.
# Part 2 (PART=2 or all): the largest GPT that trains on two H200s at each stage: for each stage the
# configs of $LADDER_<stage> (n_layers:d_model, largest first) are tried with micro-batch 1, full
# activation checkpointing, 2 steps; the first that trains is reported with its peak memory.
# EXTRA_SETS: more key=value overrides for every run (e.g. to try the script on the CPU).
set -uo pipefail
bin=${1:-build/train_gpt}
out=${OUT:-$PWD/gpu-out}/zero; mkdir -p "$out"
MB=${MB:-8}; WARMUP=${WARMUP:-3}; STEPS=${STEPS:-8}; TIMEOUT=${TIMEOUT:-300}; PART=${PART:-all}
# Ladders around the formula's limit for 139 GiB (bf16 before the split masters: 18Ψ, 14Ψ, 10Ψ, 9Ψ at
# N = 2; now 16Ψ, 13Ψ, 9Ψ, 8Ψ), largest first.
LADDER_0=${LADDER_0:-"36:4096 32:4096 28:4096"}
LADDER_1=${LADDER_1:-"48:4096 44:4096 40:4096"}
LADDER_2=${LADDER_2:-"44:5120 40:5120 36:5120"}
LADDER_3=${LADDER_3:-"48:5120 44:5120 40:5120"}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $bin ]] || { echo "no $bin: build first"; exit 1; }
source "$(dirname "$0")/gpt_toml.sh"
gpt_toml bench/zero_bench.sh 24 2048 16 "$MB" $((WARMUP + STEPS)) > "$out/base.toml"

# run NAME SET... : a 2-rank run; metrics in $out/NAME.jsonl; returns its exit code
run() {
  local name=$1; shift
  local sets=() s
  for s in "$@" ${EXTRA_SETS:-}; do sets+=(--set "$s"); done
  rm -f "$out/$name.jsonl"
  echo "--- $name: ${sets[*]}"
  local t0=$SECONDS
  timeout "$TIMEOUT" mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$bin" \
    "$out/base.toml" --set log.metrics_file="$out/$name.jsonl" "${sets[@]}" > "$out/$name.log" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    echo "    FAILED (exit $rc$([[ $rc == 124 ]] && echo ", timed out after $TIMEOUT s")) in $((SECONDS - t0)) s:"
    grep -iE "error|out of memory|fatal" "$out/$name.log" | head -3 | cut -c1-300 | sed 's/^/    | /'
  else
    echo "    ok in $((SECONDS - t0)) s: $(grep -E '^step' "$out/$name.log" | tail -1)"
  fi
  return $rc
}

summary() {  # NAME...: a table row per run
  python3 - "$out" "$WARMUP" "$@" <<'PY'
import json, statistics as st, sys
out, warm, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
G = 2**30
base = None
print("| stage | tokens/s (2 GPUs) | vs stage 0 | step ms | peak GiB (rank 0) | model state allocated GiB | slots GiB | formula GiB | allocated / formula | formula N=8 / 64 / 512 GiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name in names:
    try:
        recs = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    except OSError:
        print(f"| {name} | failed | | | | | | | | |"); continue
    start = recs[0]
    steps = [r for r in recs if "tokens_per_s" in r and r["step"] > warm]
    if not steps:
        print(f"| {name} | no timed steps | | | | | | | | |"); continue
    tps = st.median(r["tokens_per_s"] for r in steps)
    ms = st.median(r["step_ms"] for r in steps)
    peak = max(r["peak_mem_bytes"] for r in steps)
    stage = start["zero_stage"]
    base = tps if stage == 0 else base
    n = start["params_per_rank"][0]
    formula = start["model_state_bytes_per_rank"][0]
    alloc, slots = start["model_state_bytes_allocated"], start["zero_slot_bytes"]
    def pred(N):  # bf16 parameters, f32 gradients, split masters, as ZeroOptimizer::model_state_bytes
        p = 2 * n // N if stage >= 3 else 2 * n
        g = 4 * n // N if stage >= 2 else 4 * n + (4 * n // N if stage >= 1 else 0)
        return p + g + 10 * n // (N if stage >= 1 else 1)
    rel = f"{tps / base:.3f}" if base else ""
    print(f"| {stage} | {tps:,.0f} | {rel} | {ms:.1f} | {peak / G:.2f} | {alloc / G:.2f} | {slots / G:.2f} | "
          f"{formula / G:.2f} | {alloc / formula:.3f} | {pred(8) / G:.1f} / {pred(64) / G:.1f} / {pred(512) / G:.1f} |")
PY
}

if [[ $PART == all || $PART == 1 ]]; then
  for stage in 0 1 2 3; do run "z$stage" zero.stage=$stage; done
  echo "GPT-2 1.3B, bf16, micro-batch $MB, data = 2 (global batch $((2 * MB)))"
  summary z0 z1 z2 z3
fi

if [[ $PART == all || $PART == 2 ]]; then
  BIG=(train.micro_batch=1 train.checkpointing=full train.steps=2 model.vocab_size=50257)
  for stage in 0 1 2 3; do
    ladder_var=LADDER_$stage
    for cfg in ${!ladder_var:-}; do
      L=${cfg%%:*}; C=${cfg##*:}; H=$((C / 128))
      if run "big_z${stage}_${L}x${C}" zero.stage=$stage model.n_layers=$L model.d_model=$C model.n_heads=$H "${BIG[@]}"; then
        python3 - "$out/big_z${stage}_${L}x${C}.jsonl" "$stage" "$L" "$C" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
start, last = recs[0], [r for r in recs if "peak_mem_bytes" in r][-1]
print(f"LARGEST stage {sys.argv[2]}: {sys.argv[3]} layers x d_model {sys.argv[4]}: {start['parameters'] / 1e9:.2f} B parameters, "
      f"peak {last['peak_mem_bytes'] / 2**30:.1f} GiB on rank 0 (model state {start['model_state_bytes_allocated'] / 2**30:.1f} GiB)")
PY
        break
      fi
    done
  done
fi

#!/usr/bin/env bash
# Tensor parallelism on 2 GPUs (issue 5): GPT-2 1.3B (24 layers, d_model 2048, 16 heads, seq 1024,
# bf16, random tokens), micro-batch $MB (default 8), one GPU against tensor = 2 without sequence
# parallelism at each parallel.tensor_comm_chunks of $CHUNKS (default "1 2 4 8"), and with
# sequence parallelism; $WARMUP (3) untimed + $STEPS (8) timed steps, medians of rank 0's metrics.
#   bench/tensor_bench.sh [train_gpt binary, default build/train_gpt]
# Prints a markdown table: tokens/s, step ms, peak memory (rank 0), share of linear scaling.
# EXTRA_SETS: more key=value overrides for every run.
set -uo pipefail
bin=${1:-build/train_gpt}
out=${OUT:-$PWD/gpu-out}/tensor; mkdir -p "$out"
MB=${MB:-8}; WARMUP=${WARMUP:-3}; STEPS=${STEPS:-8}; TIMEOUT=${TIMEOUT:-200}; CHUNKS=${CHUNKS:-"1 2 4 8"}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $bin ]] || { echo "no $bin: build first"; exit 1; }
source "$(dirname "$0")/gpt_toml.sh"
gpt_toml bench/tensor_bench.sh 24 2048 16 "$MB" $((WARMUP + STEPS)) > "$out/base.toml"

# run NAME RANKS SET...: metrics in $out/NAME.jsonl
run() {
  local name=$1 ranks=$2; shift 2
  local sets=() s
  for s in "$@" ${EXTRA_SETS:-}; do sets+=(--set "$s"); done
  echo "--- $name: ${sets[*]}"
  local cmd=("$bin")
  [[ $ranks -gt 1 ]] && cmd=(mpirun --allow-run-as-root --bind-to none -np "$ranks" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$bin")
  CUDA_VISIBLE_DEVICES=$([[ $ranks -gt 1 ]] && echo 0,1 || echo 0) timeout "$TIMEOUT" "${cmd[@]}" "$out/base.toml" \
    --set log.metrics_file="$out/$name.jsonl" "${sets[@]}" > "$out/$name.log" 2>&1 ||
    { echo "    FAILED (exit $?)"; grep -iE "error|fatal" "$out/$name.log" | head -3 | sed 's/^/    | /'; }
}

names=(one)
run one 1
for c in $CHUNKS; do
  run "t2_c$c" 2 parallel.tensor=2 "parallel.tensor_comm_chunks=$c"
  names+=("t2_c$c")
done
run t2_sp 2 parallel.tensor=2 parallel.sequence_parallel=true
names+=(t2_sp)

python3 - "$out" "$WARMUP" "${names[@]}" <<'PY'
import json, statistics as st, sys
out, warm, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| run | tokens/s | step ms | peak GiB (rank 0) | of linear scaling |")
print("|---|---|---|---|---|")
base = None
for name in names:
    try:
        steps = [r for r in map(json.loads, open(f"{out}/{name}.jsonl")) if "tokens_per_s" in r and r["step"] > warm]
    except OSError:
        steps = []
    if not steps:
        print(f"| {name} | failed | | | |"); continue
    tps = st.median(r["tokens_per_s"] for r in steps)
    base = tps if name == "one" else base
    eff = f"{tps / (2 * base):.1%}" if base and name != "one" else ""
    print(f"| {name} | {tps:,.0f} | {st.median(r['step_ms'] for r in steps):.1f} | "
          f"{max(r['peak_mem_bytes'] for r in steps) / 2**30:.1f} | {eff} |")
PY

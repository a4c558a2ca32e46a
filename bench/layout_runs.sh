# Sourced by tensor_bench.sh and data_bench.sh: one- and two-GPU runs of one base config, and their
# table. Needs $bin (train_gpt, checked here), $out (a folder holding base.toml) and $TIMEOUT; sets
# the NCCL/MPI environment and brings in gpt_toml (gpt_toml.sh).
#   run NAME RANKS SET...  one run; metrics in $out/NAME.jsonl. $RUN_ENV ("VAR=value ...") is set
#                          for it (and passed to the ranks by mpirun -x); EXTRA_SETS apply to all.
#   summary WARMUP NAME... a markdown row per run: medians over steps after WARMUP of rank 0's
#                          tokens/s and step ms, its largest peak memory, and the share of linear
#                          scaling against the run named "one" (tokens/s / (ranks x one's)).
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $bin ]] || { echo "no $bin: build first"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/gpt_toml.sh"

run() {
  local name=$1 ranks=$2; shift 2
  local sets=() s env=() xs=()
  for s in "$@" ${EXTRA_SETS:-}; do sets+=(--set "$s"); done
  for s in ${RUN_ENV:-}; do env+=("$s"); xs+=(-x "${s%%=*}"); done
  rm -f "$out/$name.jsonl"
  echo "--- $name: ${RUN_ENV:-} ${sets[*]}"
  local cmd=("$bin")
  [[ $ranks -gt 1 ]] && cmd=(mpirun --allow-run-as-root --bind-to none -np "$ranks" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH
                             "${xs[@]}" "$bin")
  env "${env[@]}" CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((ranks - 1)))" timeout "$TIMEOUT" "${cmd[@]}" "$out/base.toml" \
    --set log.metrics_file="$out/$name.jsonl" "${sets[@]}" > "$out/$name.log" 2>&1 ||
    { echo "    FAILED (exit $?)"; grep -iE "error|fatal" "$out/$name.log" | head -3 | sed 's/^/    | /'; }
}

summary() {
  python3 - "$out" "$@" <<'PY'
import json, statistics as st, sys
out, warm, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| run | ranks | tokens/s | step ms | peak GiB (rank 0) | of linear scaling |")
print("|---|---|---|---|---|---|")
base = None
for name in names:
    try:
        recs = [json.loads(x) for x in open(f"{out}/{name}.jsonl")]
    except OSError:
        recs = []
    steps = [r for r in recs if "tokens_per_s" in r and r["step"] > warm]
    lay = next((r["layout"] for r in recs if "layout" in r), {})
    ranks = lay.get("tensor", 1) * lay.get("pipeline", 1) * lay.get("data", 1) if lay else ""
    if not steps:
        print(f"| {name} | {ranks} | failed | | | |"); continue
    tps = st.median(r["tokens_per_s"] for r in steps)  # the whole job's tokens/s
    base = tps if name == "one" else base
    eff = f"{tps / (ranks * base):.1%}" if base and name != "one" and isinstance(ranks, int) else ""
    print(f"| {name} | {ranks} | {tps:,.0f} | {st.median(r['step_ms'] for r in steps):.1f} | "
          f"{max(r['peak_mem_bytes'] for r in steps) / 2**30:.1f} | {eff} |")
PY
}

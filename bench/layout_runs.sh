# Sourced by tensor_bench.sh and data_bench.sh: one- and two-GPU runs of one base config, and their
# table. Needs $bin (train_gpt, checked here), $out (a folder holding base.toml) and $TIMEOUT; sets
# the NCCL/MPI environment and brings in gpt_toml (gpt_toml.sh).
#   run NAME RANKS SET...  one run; metrics in $out/NAME.jsonl. $RUN_ENV ("VAR=value ...") is set
#                          for it (and passed to the ranks by mpirun -x); EXTRA_SETS apply to all.
#                          With REPEAT=k, k runs (NAME.jsonl, NAME.r2.jsonl, ...): two-GPU scaling
#                          varies by about a point from run to run, more than many changes gain.
#   summary WARMUP NAME... a markdown row per run: medians over steps after WARMUP of rank 0's
#                          tokens/s and step ms, its largest peak memory, and the share of linear
#                          scaling against the run named "one" (tokens/s / (ranks x one's)); over
#                          repeated runs the median run, and the range of the scaling.
#   losses NAME...         each run's losses at steps 1, 6 and the last, and the largest relative
#                          difference of its losses to the first run's (layouts that must agree).
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $bin ]] || { echo "no $bin: build first"; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/gpt_toml.sh"

run() {
  local name=$1 ranks=$2; shift 2
  local sets=() s env=() xs=() rep file
  for s in "$@" ${EXTRA_SETS:-}; do sets+=(--set "$s"); done
  for s in ${RUN_ENV:-}; do env+=("$s"); xs+=(-x "${s%%=*}"); done
  local cmd=("$bin")
  [[ $ranks -gt 1 ]] && cmd=(mpirun --allow-run-as-root --bind-to none -np "$ranks" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH
                             "${xs[@]}" "$bin")
  for ((rep = 1; rep <= ${REPEAT:-1}; ++rep)); do
    file=$name
    [[ $rep -gt 1 ]] && file=$name.r$rep
    rm -f "$out/$file.jsonl"
    echo "--- $file: ${RUN_ENV:-} ${sets[*]}"
    env "${env[@]}" CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((ranks - 1)))" timeout "$TIMEOUT" "${cmd[@]}" "$out/base.toml" \
      --set log.metrics_file="$out/$file.jsonl" "${sets[@]}" > "$out/$file.log" 2>&1 ||
      { echo "    FAILED (exit $?)"; grep -iE "error|fatal" "$out/$file.log" | head -3 | sed 's/^/    | /'; }
  done
}

summary() {
  python3 - "$out" "$@" <<'PY'
import glob, json, re, statistics as st, sys
out, warm, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def runs_of(name):  # [(tokens/s, step ms, peak bytes, ranks)] of each run that has timed steps
    files = [f"{out}/{name}.jsonl"] + sorted(glob.glob(f"{out}/{glob.escape(name)}.r*.jsonl"),
                                               key=lambda f: int(re.search(r"\.r(\d+)\.jsonl$", f).group(1)))
    runs = []
    for f in files:
        try:
            recs = [json.loads(x) for x in open(f)]
        except OSError:
            continue
        steps = [r for r in recs if "tokens_per_s" in r and r["step"] > warm]
        lay = next((r["layout"] for r in recs if "layout" in r), {})
        if steps and lay:
            runs.append((st.median(r["tokens_per_s"] for r in steps), st.median(r["step_ms"] for r in steps),
                         max(r["peak_mem_bytes"] for r in steps), lay["tensor"] * lay["pipeline"] * lay["data"]))
    return runs

print("| run | ranks | tokens/s | step ms | peak GiB (rank 0) | of linear scaling |")
print("|---|---|---|---|---|---|")
base = None
for name in names:
    runs = runs_of(name)
    if not runs:
        print(f"| {name} | | failed | | | |"); continue
    runs.sort()
    tps, ms, peak, ranks = runs[(len(runs) - 1) // 2]  # the median run (the lower one of an even count)
    base = tps if name == "one" else base
    eff = ""
    if base and name != "one":
        eff = f"{tps / (ranks * base):.1%}"
        if len(runs) > 1:
            eff += f" ({runs[0][0] / (ranks * base):.1%}–{runs[-1][0] / (ranks * base):.1%} over {len(runs)} runs)"
    count = f" ({len(runs)} runs)" if len(runs) > 1 and name == "one" else ""
    print(f"| {name} | {ranks} | {tps:,.0f}{count} | {ms:.1f} | {max(r[2] for r in runs) / 2**30:.1f} | {eff} |")
PY
}

losses() {
  python3 - "$out" "$@" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
runs = {}
for n in names:
    try:
        runs[n] = [json.loads(x)["loss"] for x in open(f"{out}/{n}.jsonl") if '"step"' in x and '"loss"' in x]
    except OSError:
        runs[n] = []
ref = runs[names[0]]
for n in names:
    r = runs[n]
    if len(r) < 6 or len(r) != len(ref):
        print(f"{n}: {len(r)} steps (against {len(ref)}): not compared")
        continue
    d = max(abs(a - b) / abs(b) for a, b in zip(r, ref))
    print(f"{n}: losses of steps 1, 6, {len(r)}: {r[0]:.6f} {r[5]:.6f} {r[-1]:.6f}; "
          f"largest relative difference to {names[0]} {d:.2e}")
PY
}


#!/usr/bin/env bash
# The 3D layout against one GPU (issue 9): the loss curve and the speed.
#   bench/layout_3d.sh [train_gpt binary, default build/train_gpt]
# MODEL=1.3b (24 layers, d_model 2048, 16 heads) or 7b (32 layers, d_model 4096, 32 heads), sequence
# 1024, vocabulary 50257, bf16, the learnable synthetic task (data.source = "synthetic", so the loss
# falls and curves can be compared without a corpus), global batch $GB (64) sequences, $STEPS (100)
# steps, ZeRO stage $ZERO (1), 1F1B:
#   base     one GPU, micro-batch $MB (4), gradient accumulation over the global batch (BASE=1, the
#            default for 1.3B; a 7B model does not fit one H200)
#   base_mb  the same with micro-batch $MB2 (2): the same computation rounded differently in bf16,
#            which gives the noise scale the 3D curve is judged against
#   3d       mpirun -np $NP with (tensor, pipeline, data) = ($TP, $PP, NP / (TP * PP)), micro-batch $MB
# Then, per step, |loss_3d - loss_base| against |loss_base_mb - loss_base| (max and mean over the
# steps), and tokens/s, MFU and peak memory (rank 0) as medians after $WARMUP (5) steps. Logs and
# metrics go to $OUT (or ./gpu-out)/layout_3d.
# RUNS (default "base base_mb 3d") picks which of them run; the summary reads whatever metrics
# $out/layout_3d holds, so the runs can be split over calls.
# DEVICE=cpu runs the same plumbing on the CPU: MODEL=tiny (2 layers, d_model 64, vocabulary 512,
# sequence 64) in fp32, where the 3D curve must match the one-rank curve to rounding.
set -uo pipefail
bin=${1:-build/train_gpt}
out=${OUT:-$PWD/gpu-out}/layout_3d; mkdir -p "$out"
MODEL=${MODEL:-1.3b}; DEVICE=${DEVICE:-cuda}; NP=${NP:-8}; TP=${TP:-2}; PP=${PP:-2}; ZERO=${ZERO:-1}
GB=${GB:-64}; MB=${MB:-4}; MB2=${MB2:-2}; STEPS=${STEPS:-100}; WARMUP=${WARMUP:-5}; TIMEOUT=${TIMEOUT:-540}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $bin ]] || { echo "no $bin: build first"; exit 1; }
case $MODEL in
  1.3b) shape=(24 2048 16); BASE=${BASE:-1} ;;
  7b) shape=(32 4096 32); BASE=${BASE:-0} ;;
  tiny) shape=(2 64 2); BASE=${BASE:-1} ;;
  *) echo "MODEL must be 1.3b, 7b or tiny"; exit 1 ;;
esac
(( NP % (TP * PP) == 0 )) || { echo "NP=$NP is not a multiple of TP * PP = $((TP * PP))"; exit 1; }
source "$(dirname "$0")/gpt_toml.sh"
config=$out/$MODEL.toml
gpt_toml bench/layout_3d.sh "${shape[@]}" "$MB" "$STEPS" "global_batch = $GB" > "$config"
sets=(data.source=synthetic train.device="$DEVICE" zero.stage="$ZERO" parallel.schedule=1f1b)
if [[ $DEVICE == cpu ]]; then sets+=(train.precision=fp32); fi
if [[ $MODEL == tiny ]]; then sets+=(model.vocab_size=512 model.seq_len=64); fi

# run NAME NP SET... : one train_gpt run within $TIMEOUT s; metrics in $out/NAME.jsonl, log in
# $out/NAME.log.
run() {
  local name=$1 np=$2; shift 2
  local args=() s cmd
  for s in "${sets[@]}" "$@"; do args+=(--set "$s"); done
  if [[ $np == 1 ]]; then cmd=(env CUDA_VISIBLE_DEVICES=0 "$bin")
  else cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$bin")
  fi
  rm -f "$out/$name.jsonl"
  echo "--- $name ($(date +%T)): ${cmd[*]} $config ${args[*]}"
  local t0=$SECONDS
  timeout "$TIMEOUT" "${cmd[@]}" "$config" --set log.metrics_file="$out/$name.jsonl" "${args[@]}" > "$out/$name.log" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    echo "    FAILED (exit $rc$([[ $rc == 124 ]] && echo ", timed out after $TIMEOUT s")); last lines of $out/$name.log:"
    tail -12 "$out/$name.log" | sed 's/^/    | /'
  else
    echo "    ok in $((SECONDS - t0)) s: $(grep -E '^step' "$out/$name.log" | tail -1)"
  fi
}

RUNS=${RUNS:-base base_mb 3d}
wants() { [[ " $RUNS " == *" $1 "* ]]; }
if [[ $BASE == 1 ]]; then
  wants base && run base 1
  wants base_mb && run base_mb 1 train.micro_batch="$MB2"
fi
wants 3d && run 3d "$NP" parallel.tensor="$TP" parallel.pipeline="$PP"

python3 - "$out" "$WARMUP" "$MODEL" <<'PY' | tee "$out/layout_3d.md"
import json, os, statistics, sys
out, warmup, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path):
        return None, []
    recs = [json.loads(l) for l in open(path) if l.strip()]
    start = next((r for r in recs if r.get("event") == "start"), None)
    return start, [r for r in recs if "step" in r and "loss" in r]
print(f"| run | layout (t, p, d) | steps | tokens/s | step ms | peak GiB (rank 0) | final loss |")
print("|---|---|---|---|---|---|---|")
runs = {}
for name in ("base", "base_mb", "3d"):
    start, steps = load(name)
    if not steps:
        continue
    runs[name] = {r["step"]: r["loss"] for r in steps}
    timed = [r for r in steps if r["step"] > warmup] or steps
    lay = start["layout"] if start else {}
    print(f"| {name} | ({lay.get('tensor')}, {lay.get('pipeline')}, {lay.get('data')}) | {len(steps)} | "
          f"{statistics.median(r['tokens_per_s'] for r in timed):,.0f} | {statistics.median(r['step_ms'] for r in timed):.1f} | "
          f"{max(r['peak_mem_bytes'] for r in steps) / 2**30:.2f} | {steps[-1]['loss']:.4f} |")
def diff(a, b):
    common = sorted(set(runs[a]) & set(runs[b]))
    d = [abs(runs[a][s] - runs[b][s]) for s in common]
    return (max(d), statistics.mean(d), len(d)) if d else None
print()
for a, b, what in (("3d", "base", "3D against one GPU"), ("base_mb", "base", "noise: one GPU, micro-batch changed")):
    if a in runs and b in runs:
        r = diff(a, b)
        if r:
            print(f"{what}: |loss difference| max {r[0]:.2e}, mean {r[1]:.2e} over {r[2]} steps")
PY

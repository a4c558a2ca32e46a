#!/usr/bin/env bash
# Pipeline parallelism on 2 GPUs against the bubble formula (issue 6, performance):
#   bench/pipeline_bench.sh [train_gpt binary, default build/train_gpt]
# GPT-2 1.3B (24 layers, d_model 2048, 16 heads, seq 1024, bf16, random tokens), micro-batch
# $MB (default 4), m = $MS (default "8 16 32") micro-batches per step:
#   baseline    pipeline = 1 on GPU 0, the same global batch m x MB by gradient accumulation
#   1f1b        pipeline = 2 (mpirun -np 2)
#   interleaved pipeline = 2, virtual_stages = 2
# Each run: $WARMUP (3) untimed + $STEPS (8) timed steps; medians of train_gpt's metrics JSON lines
# (rank 0: tokens_per_s, step_ms, peak_mem_bytes = stage 0's allocator peak, phase_ms). Peak memory
# per stage: the most nvidia-smi memory.used of each GPU during the run (what the caching allocator
# holds, plus the CUDA/NCCL context). Prediction: ideal = baseline step / 2, predicted = ideal x
# (1 + (p - 1) / (m v)). Then, per pipeline run, pipeline_predict (next to train_gpt) prints each
# virtual stage's measured forward/backward time, the imbalance, and the step predicted from those
# times by the bubble formula and by the schedule simulator. A run that fails prints its last log
# lines; the script goes on.
# BIG=1 adds a model that does not fit one H200 (about 140 GiB) but fits two stages: 48 layers,
# d_model 4096, 32 heads, 9.88B parameters stored (vocabulary padded); bf16 model state at 18 bytes
# per parameter (16 since the split masters) is 178 GB (166 GiB) on one GPU, 91 GB (85 GiB) per stage at pipeline = 2. (40
# layers, 8.27B, would need 148.8 GB (138.6 GiB): too close to be sure to fail.) Micro-batch 1, full
# activation checkpointing, m = $BIG_M (8) micro-batches: pipeline = 1 (expected to fail: out of
# memory) and pipeline = 2 (1f1b), each within $BIG_TIMEOUT (600) s.
# Logs and the tables go to $OUT (or ./gpu-out)/pipeline.
set -uo pipefail
bin=${1:-build/train_gpt}
predict=$(dirname "$bin")/pipeline_predict
out=${OUT:-$PWD/gpu-out}/pipeline; mkdir -p "$out"
MB=${MB:-4}; MS=${MS:-"8 16 32"}; WARMUP=${WARMUP:-3}; STEPS=${STEPS:-8}; TIMEOUT=${TIMEOUT:-240}
BIG=${BIG:-0}; BIG_M=${BIG_M:-8}; BIG_TIMEOUT=${BIG_TIMEOUT:-600}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -x $bin && -x $predict ]] || { echo "no $bin or $predict: build first (bench/gpu_session.sh builds into build/)"; exit 1; }
source "$(dirname "$0")/gpt_toml.sh"
gpt_toml bench/pipeline_bench.sh 24 2048 16 "$MB" $((WARMUP + STEPS)) > "$out/gpt2_1.3b.toml"

# run NAME NP CONFIG SET... : one train_gpt run within $TIMEOUT s; metrics in $out/NAME.jsonl, GPU
# memory in $out/NAME.mem, log in $out/NAME.log; its exit status in $rc.
run() {
  local name=$1 np=$2 config=$3; shift 3
  local sets=() s
  for s in "$@"; do sets+=(--set "$s"); done
  rm -f "$out/$name.jsonl" "$out/$name.mem"
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 200 > "$out/$name.mem" 2>/dev/null &
  local smi=$!
  local cmd
  if [[ $np == 1 ]]; then
    cmd=(env CUDA_VISIBLE_DEVICES=0 "$bin")
  else
    cmd=(mpirun --allow-run-as-root --bind-to none -np "$np" -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$bin")
  fi
  echo "--- $name: ${cmd[*]} $config ${sets[*]}"
  local t0=$SECONDS
  timeout "$TIMEOUT" "${cmd[@]}" "$config" --set log.metrics_file="$out/$name.jsonl" "${sets[@]}" > "$out/$name.log" 2>&1
  rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  if [[ $rc != 0 ]]; then
    echo "    FAILED (exit $rc$([[ $rc == 124 ]] && echo ", timed out after $TIMEOUT s")); last lines of $out/$name.log:"
    tail -15 "$out/$name.log" | sed 's/^/    | /'
  else
    echo "    ok in $((SECONDS - t0)) s: $(grep -E '^step' "$out/$name.log" | tail -1)"
  fi
}

# stage_table NAME: pipeline_predict's table for a finished run, also in $out/NAME.predict.md.
stage_table() {
  echo "--- per-stage times of $1"
  "$predict" "$out/$1.jsonl" --warmup "$WARMUP" > "$out/$1.predict.md" 2>&1 || echo "    pipeline_predict failed:"
  sed 's/^/    /' "$out/$1.predict.md"
}

config=$out/gpt2_1.3b.toml
for m in $MS; do
  gb=$((m * MB))
  run "base_m$m" 1 "$config" parallel.pipeline=1 train.global_batch=$gb
  run "1f1b_m$m" 2 "$config" parallel.pipeline=2 parallel.schedule=1f1b train.global_batch=$gb
  run "inter_m$m" 2 "$config" parallel.pipeline=2 parallel.schedule=interleaved parallel.virtual_stages=2 \
    train.global_batch=$gb
done

python3 - "$out" "$WARMUP" "$MS" "$MB" <<'PY' | tee "$out/pipeline.md"
import json, os, statistics, sys
out, warmup, ms, mb = sys.argv[1], int(sys.argv[2]), [int(m) for m in sys.argv[3].split()], int(sys.argv[4])

def metrics(name):
    path = os.path.join(out, name + ".jsonl")
    try:
        recs = [json.loads(l) for l in open(path) if l.strip()]
    except (OSError, ValueError) as e:
        return None, f"no metrics ({e.__class__.__name__})"
    steps = sorted((r for r in recs if "step" in r and "step_ms" in r and "event" not in r), key=lambda r: r["step"])
    timed = steps[warmup:]
    if not timed:
        return None, f"{len(steps)} step records, none after the warm-up"
    med = lambda k: statistics.median(r[k] for r in timed)
    res = {"step_ms": med("step_ms"), "tokens_per_s": med("tokens_per_s"),
           "peak0": max(r.get("peak_mem_bytes", 0) for r in timed)}
    ph = [r["phase_ms"] for r in timed if isinstance(r.get("phase_ms"), dict)]
    if ph:
        res["phases"] = {k: statistics.median(p[k] for p in ph if k in p) for k in ph[0]}
    return res, None

def gpu_mem(name):
    peak = {}
    try:
        for line in open(os.path.join(out, name + ".mem")):
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                peak[int(parts[0])] = max(peak.get(int(parts[0]), 0), int(parts[1]))
    except OSError:
        pass
    return peak

print(f"GPT-2 1.3B, seq 1024, bf16, micro-batch {mb}, 2 H200; median of the timed steps.")
print("ideal = baseline step (pipeline 1, same global batch) / 2; predicted = ideal x (1 + (p-1)/(m v)), p = 2.")
print("mem GPU0/GPU1: most nvidia-smi memory.used during the run (GiB); alloc peak: stage 0's allocator peak.\n")
print("| m | schedule | v | tokens/s | step ms | predicted ms | measured / predicted | mem GPU0 / GPU1 (GiB) | alloc peak stage 0 (GiB) | phases ms (schedule / reductions / optimizer, stage 0) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for m in ms:
    base, berr = metrics(f"base_m{m}")
    for name, sched, v in ((f"base_m{m}", "pipeline 1 (baseline)", 1), (f"1f1b_m{m}", "1f1b", 1), (f"inter_m{m}", "interleaved", 2)):
        res, err = (base, berr) if name.startswith("base") else metrics(name)
        if err:
            print(f"| {m} | {sched} | {v} | {err} | | | | | | |")
            continue
        mem = gpu_mem(name)
        memtxt = " / ".join(f"{mem[i] / 1024:.1f}" for i in sorted(mem)) or "n/a"
        pred = ratio = ""
        if not name.startswith("base") and base:
            p_ms = base["step_ms"] / 2 * (1 + 1 / (m * v))
            pred, ratio = f"{p_ms:.1f}", f"{res['step_ms'] / p_ms:.3f}"
        ph = res.get("phases")
        phtxt = " / ".join(f"{ph[k]:.1f}" for k in ("schedule", "reductions", "optimizer") if k in ph) if ph else ""
        print(f"| {m} | {sched} | {v} | {res['tokens_per_s']:,.0f} | {res['step_ms']:.1f} | {pred} | {ratio} | "
              f"{memtxt} | {res['peak0'] / 2**30:.1f} | {phtxt} |")
PY

echo; echo "Per-stage compute times and the step predicted from them (pipeline_predict):"
for m in $MS; do
  for name in "1f1b_m$m" "inter_m$m"; do
    [[ -s $out/$name.jsonl ]] && stage_table "$name"
  done
done

if [[ $BIG == 1 ]]; then
  gpt_toml "bench/pipeline_bench.sh (BIG=1)" 48 4096 32 1 $((WARMUP + STEPS)) "global_batch = $BIG_M" \
    'checkpointing = "full"' > "$out/gpt_10b.toml"
  TIMEOUT=$BIG_TIMEOUT
  echo; echo "BIG: 48 layers, d_model 4096, 32 heads, micro-batch 1, full checkpointing, m = $BIG_M"
  run big_p1 1 "$out/gpt_10b.toml" parallel.pipeline=1
  # One GPU cannot hold this model's state: the run should stop on the allocator's out-of-memory error.
  oom=$(grep -m1 -i "out of GPU memory\|out of memory" "$out/big_p1.log")
  if [[ $rc == 0 ]]; then
    echo "    pipeline = 1 did NOT fail: the model fits one GPU, so it does not show what pipelining enables"
  elif [[ -n $oom ]]; then
    echo "    pipeline = 1 failed as expected (exit $rc), out of memory: $oom"
  else
    echo "    pipeline = 1 failed (exit $rc) but not with out of memory: see $out/big_p1.log"
  fi
  run big_1f1b 2 "$out/gpt_10b.toml" parallel.pipeline=2 parallel.schedule=1f1b
  if [[ $rc == 0 ]]; then
    grep -m1 "^memory per rank" "$out/big_1f1b.log" | sed 's/^/    /'
    echo "    most memory.used per GPU (MiB): $(awk -F', *' '$2 > m[$1] {m[$1] = $2} END {for (g in m) printf "GPU%s %s  ", g, m[g]}' "$out/big_1f1b.mem")"
    stage_table big_1f1b
  fi
fi

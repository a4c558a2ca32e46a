#!/usr/bin/env bash
# Session call 1 (2×H200): GEMM candidates tuned in steady state (TRELLIS_MATMUL_TUNE=1: the first
# candidate runs 200 ms untimed, then 3 rounds of ~15 ms a candidate) against the heuristic's first
# pick, alternating on the same GPU: GPU 0 GPT-2 1.3B micro-batch 16, GPU 1 350M micro-batch 16 and
# 124M micro-batch 32, 25 steps each, medians of steps 6-25. Then GPU 1: bench_gpt 1.3B with
# --rounds 2 (PyTorch first, then Trellis first), the heuristic's picks.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
source bench/gpt_toml.sh
gpt_toml call1 24 2048 16 16 25 > "$out/m1.3b.toml"
gpt_toml call1 12 768 12 32 25 > "$out/m124m.toml"
gpt_toml call1 24 1024 16 16 25 > "$out/m350m.toml"
ab() {  # GPU MODEL
  local gpu=$1 model=$2 rep which
  for rep in 1 2; do for which in base tune; do
    local tune=0; [[ $which == tune ]] && tune=1
    CUDA_VISIBLE_DEVICES=$gpu TRELLIS_MATMUL_TUNE=$tune TRELLIS_MATMUL_LOG=$tune timeout 150 build/train_gpt \
      "$out/m$model.toml" --set log.metrics_file="$out/$model.$which.$rep.jsonl" \
      > "$out/$model.$which.$rep.log" 2>&1 || echo "$model $which $rep FAILED"
  done; done
}
echo "=== runs $(date +%T)"
ab 0 1.3b &
(ab 1 350m; ab 1 124m
 echo "=== bench rounds $(date +%T)"
 CUDA_VISIBLE_DEVICES=1 timeout 420 python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt \
   --models 1.3b --micro-batch 16 --rounds 2 --out "$out/bench_rounds.md" > "$out/bench_rounds.log" 2>&1
 echo "bench exit $?") &
wait
python3 - "$out" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
for model in ("124m", "350m", "1.3b"):
    cells = []
    for rep in (1, 2):
        for which in ("base", "tune"):
            try:
                recs = [json.loads(l) for l in open(f"{out}/{model}.{which}.{rep}.jsonl") if l.strip()]
                ms = [r["step_ms"] for r in recs if "step_ms" in r][5:]
                cells.append(f"{which} {st.median(ms):.1f}")
            except Exception:
                cells.append(f"{which} ?")
    print(f"{model}: " + ", ".join(cells) + " ms (median step, steps 6-25)")
PY
grep -h "tuned:" "$out"/1.3b.tune.1.log | sed 's/.*plan #/#/; s/align.*|//' | head -20
grep -E "^\| " "$out/bench_rounds.log" | tail -6
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 6 (2×H200): as call 5, after the one-vector layer-norm backward went back to 32-row
# chunks (call 5: 124M and 350M no faster with 64). A/B on the same GPU. Old =
# 5df3f60 (the worktree ../.snap_old, carried), new = this checkout; train_gpt built for both, then
# runs alternating old, new, old, new: GPU 0 GPT-2 1.3B micro-batch 16, GPU 1 124M micro-batch 32
# and 350M micro-batch 16, 20 steps each, medians of steps 6-20.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
old=$(cd ../.snap_old && pwd)
[[ -d $old/third_party ]] || ln -sfn "$PWD/third_party" "$old/third_party"
echo "=== build $(date +%T)"
for t in "$PWD build" "$old build"; do
  set -- $t
  (cmake -S "$1" -B "$1/$2" -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_$(basename "$1").log" 2>&1 &&
     cmake --build "$1/$2" -j16 --target train_gpt >> "$out/build_$(basename "$1").log" 2>&1 || echo "build $1 FAILED") &
done
wait
source bench/gpt_toml.sh
gpt_toml call6 24 2048 16 16 20 > "$out/m1.3b.toml"
gpt_toml call6 12 768 12 32 20 > "$out/m124m.toml"
gpt_toml call6 24 1024 16 16 20 > "$out/m350m.toml"
ab() {  # GPU MODEL
  local gpu=$1 model=$2 rep which bin
  for rep in 1 2; do for which in old new; do
    bin=build/train_gpt; [[ $which == old ]] && bin=$old/build/train_gpt
    CUDA_VISIBLE_DEVICES=$gpu timeout 120 "$bin" "$out/m$model.toml" --set log.metrics_file="$out/$model.$which.$rep.jsonl" \
      > "$out/$model.$which.$rep.log" 2>&1 || echo "$model $which $rep FAILED"
  done; done
}
echo "=== runs $(date +%T)"
ab 0 1.3b &
(ab 1 124m; ab 1 350m) &
wait
python3 - "$out" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
for model in ("124m", "350m", "1.3b"):
    cells = []
    for rep in (1, 2):
        for which in ("old", "new"):
            try:
                recs = [json.loads(l) for l in open(f"{out}/{model}.{which}.{rep}.jsonl") if l.strip()]
                ms = [r["step_ms"] for r in recs if "step_ms" in r][5:]
                cells.append(f"{which} {st.median(ms):.1f}")
            except Exception as e:
                cells.append(f"{which} ?")
    print(f"{model}: " + ", ".join(cells) + " ms (median step, steps 6-20)")
PY
echo "=== done $(date +%T)"

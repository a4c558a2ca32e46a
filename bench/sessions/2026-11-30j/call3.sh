#!/usr/bin/env bash
# Session call 3 (2×H200): split fp32 master weights beside bf16 parameters. GPU 0: the CUDA parity
# tests, the PyTorch check, then GPT-2 1.3B micro-batch 16 alternating old (2e08e47, the worktree
# ../.snap_old, carried) and new on the same GPU (25 steps, medians of steps 6-25, peak memory),
# then the new build's per-op profile. GPU 1: bench_gpt 124M (micro-batch 32), 350M and 1.3B
# (micro-batch 16) against PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
old=$(cd ../.snap_old && pwd)
[[ -d $old/third_party ]] || ln -sfn "$PWD/third_party" "$old/third_party"
echo "=== build $(date +%T)"
(cmake -S "$old" -B "$old/build" -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build_old.log" 2>&1 &&
   cmake --build "$old/build" -j8 --target train_gpt >> "$out/build_old.log" 2>&1 || echo "old build FAILED") &
build_trellis
wait
source bench/gpt_toml.sh
gpt_toml call3 24 2048 16 16 25 > "$out/m1.3b.toml"
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  echo "=== [gpu0] parity $(date +%T)"
  timeout 200 build/tests/ops_parity_test > "$out/parity.log" 2>&1; echo "parity exit $?"
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|differ" "$out/parity.log" | head -20
  grep -E "AdamW" "$out/parity.log" | grep -E "OK|FAILED" | head -12
  timeout 100 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda 2>&1 | tail -2
  echo "=== [gpu0] A/B $(date +%T)"
  for rep in 1 2; do for which in old new; do
    bin=build/train_gpt; [[ $which == old ]] && bin=$old/build/train_gpt
    timeout 120 "$bin" "$out/m1.3b.toml" --set log.metrics_file="$out/ab.$which.$rep.jsonl" > "$out/ab.$which.$rep.log" 2>&1 \
      || echo "$which $rep FAILED"
  done; done
  echo "=== [gpu0] profile $(date +%T)"
  timeout 90 build/train_gpt "$out/m1.3b.toml" --set train.steps=10 --set log.profile_ops=true > "$out/prof.log" 2>&1 || echo "prof FAILED"
  sed -n '/per-op device time/,$p' "$out/prof.log" | grep -E "adamw|sum_squares|^total"
  echo "=== [gpu0] done $(date +%T)"
}
gpu0 > "$out/gpu0.log" 2>&1 &
export CUDA_VISIBLE_DEVICES=1
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --trellis build/train_gpt"
echo "=== [gpu1] bench $(date +%T)"
timeout 150 $B --models 124m --micro-batch 32 --out "$out/bench_124m.md" > "$out/bench_124m.log" 2>&1
timeout 300 $B --models 350m,1.3b --micro-batch 16 --out "$out/bench_350m_1.3b.md" > "$out/bench_350m_1.3b.log" 2>&1
grep -hE "^\| [0-9]|rror" "$out/bench_124m.md" "$out/bench_350m_1.3b.md"
wait
cat "$out/gpu0.log"
python3 - "$out" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
cells = []
for rep in (1, 2):
    for which in ("old", "new"):
        try:
            recs = [json.loads(l) for l in open(f"{out}/ab.{which}.{rep}.jsonl") if l.strip()]
            steps = [r for r in recs if "step_ms" in r][5:]
            cells.append(f"{which} {st.median(r['step_ms'] for r in steps):.1f} ms "
                         f"{max(r.get('peak_mem_bytes', 0) for r in steps) / 2**30:.2f} GiB")
        except Exception:
            cells.append(f"{which} ?")
print("1.3B A/B (median step of 6-25, peak): " + "; ".join(cells))
PY
grep -h "loss" "$out"/ab.*.2.log | grep "step    25" 
echo "=== done $(date +%T)"

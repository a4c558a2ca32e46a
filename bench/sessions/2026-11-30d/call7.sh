#!/usr/bin/env bash
# Session call 7 (2×H200), the last (~4 min of device time): data = 2 at 350M micro-batch 16 with the
# token embedding's gradient reduced as backward begins and its last rows gathered
# (zero.embedding_grad = auto, which takes gather_rows here) against the whole-gradient all-reduce
# after the embedding backward (all_reduce), and one GPU; the final losses of both side by side.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_trellis
echo "=== data = 2 $(date +%T)"
(
  bin=build/train_gpt; out=$out/data; mkdir -p "$out"; TIMEOUT=40
  source bench/layout_runs.sh
  gpt_toml call7 24 1024 16 16 15 > "$out/base.toml"
  run one 1
  run d2 2
  run d2_all_reduce 2 zero.embedding_grad=all_reduce
  summary 5 one d2 d2_all_reduce
  grep -h "data parallel:" "$out/d2.log" "$out/d2_all_reduce.log"
  python3 - "$out" <<'PY'
import json, sys
for n in ("d2", "d2_all_reduce"):
    l = [json.loads(x)["loss"] for x in open(f"{sys.argv[1]}/{n}.jsonl") if '"step"' in x and '"loss"' in x]
    print(n, "losses of steps 1, 5, 10, 15:", [round(l[i], 6) for i in (0, 4, 9, 14)])
PY
)
echo "=== done $(date +%T)"

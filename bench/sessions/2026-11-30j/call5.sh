#!/usr/bin/env bash
# Session call 5 (2×H200): launch_gap_probe.cu (what CUDA graphs could save: the time between
# dependent kernels on a stream against one graph), and checkpoint resume with split master weights
# on the GPU: the tiny config in bf16, deterministic, 30 steps against 15 + resume + 15, at one GPU
# and at data = 2 with ZeRO stage 1 (per-rank blobs from device memory); losses compared bitwise.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
nvcc -O2 -arch=sm_90 bench/sessions/2026-11-30j/launch_gap_probe.cu -o /tmp/lgp > "$out/lgp_build.log" 2>&1 || tail -3 "$out/lgp_build.log"
echo "=== launch gap probe $(date +%T)"
CUDA_VISIBLE_DEVICES=0 timeout 60 /tmp/lgp
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 --target train_gpt >> "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
S=(--set train.device=cuda --set train.precision=bf16 --set train.deterministic=true --set train.steps=30
   --set log.every=1 --set log.val_every=0 --set train.global_batch=16)
resume_check() {  # NAME LAUNCHER...
  local name=$1; shift
  local d=$out/$name; mkdir -p "$d"
  "$@" build/train_gpt examples/configs/tiny.toml "${S[@]}" --set log.metrics_file="$d/full.jsonl" > "$d/full.log" 2>&1 || echo "$name full FAILED"
  "$@" build/train_gpt examples/configs/tiny.toml "${S[@]}" --set log.metrics_file="$d/a.jsonl" --set checkpoint.dir="$d/ck" \
    --set checkpoint.every=5 --set train.stop_after=15 > "$d/a.log" 2>&1 || echo "$name first FAILED"
  "$@" build/train_gpt examples/configs/tiny.toml "${S[@]}" --set log.metrics_file="$d/b.jsonl" --set checkpoint.dir="$d/ck" \
    > "$d/b.log" 2>&1 || echo "$name resume FAILED"
  python3 - "$d" "$name" <<'PY'
import json, sys
d, name = sys.argv[1:3]
def losses(f):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/{f}.jsonl")) if "step" in r and "loss" in r and r.get("split") != "val"}
full, a, b = losses("full"), losses("a"), losses("b")
same = sorted(b) == list(range(16, 31)) and all(b[s] == full[s] for s in b) and all(a[s] == full[s] for s in a)
print(f"{name}: steps 16..30 after resume {'bitwise equal to' if same else 'DIFFER from'} the uninterrupted run "
      f"(loss at 30: {full.get(30)} / {b.get(30)})")
PY
}
echo "=== resume, one GPU $(date +%T)"
resume_check one env CUDA_VISIBLE_DEVICES=0
echo "=== resume, data = 2, ZeRO stage 1 $(date +%T)"
S+=(--set zero.stage=1)
resume_check data2 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH
grep -h "blobs\|master" "$out"/data2/ck/step_00000015/manifest.json 2>/dev/null | grep -o '"name": "[^"]*master[^"]*"' | head
tar czf /tmp/call5.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call5.tgz "$out/"
echo "=== done $(date +%T)"

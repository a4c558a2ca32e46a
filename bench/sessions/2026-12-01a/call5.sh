#!/usr/bin/env bash
# Session call 5 (1×H200): zero.offload = nvme (the master and moments in unlinked files mapped from
# zero.offload_dir): gpu_e2e (nvme against on the device, fp32), and GPT-2 1.3B micro-batch 16 with
# the state in files on the machine's local disk (15.7 GB: it fits in memory, so the page cache
# holds it and writes it back).
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt
echo "=== gpu_e2e $(date +%T)"
(cd build && cmake . > /dev/null && timeout 300 ctest -R gpu_e2e -V > "$out/gpu_e2e.log" 2>&1); echo "gpu_e2e exit $?"
grep -E "ok:|FAIL|SKIP|Passed|Failed" "$out/gpu_e2e.log" | sed 's/^[0-9]*: //' | head -16
files=$(mktemp -d /tmp/offload-files.XXXXXX); df -h "$files" | tail -1
echo "=== b13_nvme $(date +%T)"
timeout 240 python3 bench/bench_gpt.py --skip-torch --trellis build/train_gpt --models 1.3b --micro-batch 16 --steps 6 \
  --warmup 2 --trellis-set zero.offload=nvme --trellis-set zero.offload_dir="$files" --out "$out/b13_nvme.md" \
  > "$out/b13_nvme.log" 2>&1
echo "exit $?"; grep -E "^\| 1.3b|rror" "$out/b13_nvme.log" | tail -2; echo "left in the directory: $(ls "$files" | wc -l) files"
tar czf /tmp/call5.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call5.tgz "$out/"
echo "=== done $(date +%T)"

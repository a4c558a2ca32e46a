#!/usr/bin/env bash
# Session call 1 (1×H200): the router z-loss (moe.z_loss_coef). MoE parity (the route's lse, the router
# backward with and without the z term, the three statistics; f32/bf16/f16), the PyTorch MoE check
# with the z-loss, gpu_e2e (its MoE cases now carry the z-loss); then GPT-2 124M's shape with 8
# experts (top 2, every other block) on the synthetic task in bf16, 400 steps, without and with
# z_loss_coef = 0.001: the logged z-loss, the loss and the step time.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test
echo "=== parity $(date +%T)"
timeout 120 build/tests/ops_parity_test --gtest_filter='*MoE*' > "$out/parity.log" 2>&1; echo "parity exit $?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|Failure" "$out/parity.log" | head -12
echo "=== torch parity with experts and the z-loss $(date +%T)"
timeout 120 python3 tests/e2e/torch_parity.py build/train_gpt examples/configs/tiny.toml --device cuda --set moe.experts=4 \
  --set moe.top_k=2 --set moe.capacity_factor=1.0 --set moe.aux_loss_coef=0.1 --set moe.z_loss_coef=0.1 > "$out/torch_parity.log" 2>&1
echo "torch parity exit $?"; tail -3 "$out/torch_parity.log"
echo "=== gpu_e2e $(date +%T)"
timeout 280 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL|PASS|experts" "$out/gpu_e2e.log" | head -8
MOE="--set train.micro_batch=16 --set moe.experts=8 --set moe.top_k=2 --set moe.layer_freq=2 --set data.source=synthetic
  --set train.steps=400 --set log.every=50 --set log.val_every=0"
for run in 0:a 0.001:a 0:b 0.001:b; do
  z=${run%:*}; tag=z$z${run#*:}
  echo "=== 124M, 8 experts, z_loss_coef $z $(date +%T)"
  timeout 120 build/train_gpt bench/profile_124m.toml $MOE --set moe.z_loss_coef=$z \
    --set log.metrics_file="$out/$tag.jsonl" > "$out/$tag.log" 2>&1
  echo "exit $?"; grep -E "^step " "$out/$tag.log" | sed -E 's/\| lr [^|]*\|//'
  python3 -c "
import json,statistics,sys
r=[json.loads(l) for l in open('$out/$tag.jsonl')]; s=[x for x in r if 'step' in x and x['step']>20]
print('median step ms %.2f over steps 21-400, peak %.2f GiB' % (statistics.median(x['step_ms'] for x in s), max(x['peak_mem_bytes'] for x in s)/2**30))"
done
echo "=== done $(date +%T)"

#!/usr/bin/env bash
# Session call 1 (1×H200): ln_probe.cu (the layer-norm backward, bias-gradient sums and layer-norm
# forward at GPT-2 1.3B's shapes against streaming kernels moving the same bytes), then a 1.3B
# training run with the SM clock, power and throttle reasons sampled every 50 ms.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== probe $(date +%T)"
nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/sessions/2026-11-30i/ln_probe.cu core/dtype.cpp -o /tmp/ln_probe \
  > "$out/probe_build.log" 2>&1 || { tail -5 "$out/probe_build.log"; }
timeout 120 /tmp/ln_probe 2>&1 | tee "$out/probe.log"
build_trellis
source bench/gpt_toml.sh
gpt_toml call1 24 2048 16 16 30 > "$out/run.toml"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -i 0 -lms 50 > "$out/smi.csv" 2>&1 &
smi=$!
sleep 1
echo "=== train $(date +%T.%N)"
timeout 150 build/train_gpt "$out/run.toml" --set log.metrics_file="$out/run.jsonl" > "$out/run.log" 2>&1 || echo "train FAILED"
echo "=== trained $(date +%T.%N)"
sleep 1
kill $smi
python3 - "$out" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
recs = [json.loads(l) for l in open(f"{out}/run.jsonl") if l.strip()]
steps = [r for r in recs if "step_ms" in r or "step_time_ms" in r]
key = "step_ms" if steps and "step_ms" in steps[0] else "step_time_ms"
print("steps:", " ".join(f"{r[key]:.1f}" for r in steps))
rows = [l.split(", ") for l in open(f"{out}/smi.csv") if l.count(",") >= 5]
busy = [r for r in rows if float(r[3]) > 300]
if busy:
    clk = [float(r[1]) for r in busy]; pw = [float(r[3]) for r in busy]
    print(f"samples with power > 300 W: {len(busy)}; SM clock median {st.median(clk):.0f} MHz "
          f"(min {min(clk):.0f}, max {max(clk):.0f}); power median {st.median(pw):.0f} W (max {max(pw):.0f})")
    reasons = {}
    for r in busy: reasons[r[5].strip()] = reasons.get(r[5].strip(), 0) + 1
    print("throttle reasons (bitmask: count):", reasons)
PY
echo "=== done $(date +%T)"
